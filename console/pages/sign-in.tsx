import { useState } from "preact/hooks";
import { plainHttpKeyProblem } from "../../client/plain-http.js";
import type { ConsoleAuth } from "../../shared/console/config.js";
import { ApiProblem, api } from "../api.js";
import { rememberKey, signOut, startSignIn } from "../auth.js";
import { ErrorMessage } from "../components.js";

/** Asks for credentials the way this server takes them. */
export function SignInPage({ auth, onSignedIn }: { auth: ConsoleAuth; onSignedIn: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<unknown>(null);

  if (auth.kind === "iam") {
    return (
      <>
        <h1 tabIndex={-1}>Sign in</h1>
        <p>
          This deployment authorizes API requests with IAM (SigV4), which a browser cannot sign.
          Deploy the stack with the JWT option (<code>-c jwtIssuer=… -c jwtAudience=…</code>) to use
          the console with OIDC sign-in, or use the <code>scheduler</code> CLI with your AWS
          profile. The API reference is at <a href="/docs">/docs</a>.
        </p>
      </>
    );
  }
  if (auth.kind === "oidc") {
    return (
      <>
        <h1 tabIndex={-1}>Sign in</h1>
        <p>This deployment takes tokens from {new URL(auth.issuer).host}.</p>
        <button
          type="button"
          onClick={() => {
            startSignIn(auth, location.pathname + location.search).catch(setError);
          }}
        >
          Sign in with {new URL(auth.issuer).host}
        </button>
        <ErrorMessage error={error} />
      </>
    );
  }
  const submit = async (event: Event) => {
    event.preventDefault();
    // The key goes to this page's origin: over plain http to a host that is not loopback (a
    // tunnel's http:// name for the sandbox), anyone on the way would read it. The CLI's rule, and
    // beside it the browser's own: a secure context is https, or a name it keeps on loopback itself
    // (`*.localhost`, which the sandbox answers; the CLI, whose resolver promises no such thing,
    // does not take it).
    const problem = window.isSecureContext ? null : plainHttpKeyProblem(new URL(location.href));
    if (problem !== null) {
      setError(
        new Error(
          `API key: ${problem}: open the console at an https:// address, or at localhost on the sandbox's machine.`,
        ),
      );
      return;
    }
    rememberKey(key.trim());
    try {
      await api.listJobs({ limit: 1 });
      onSignedIn();
    } catch (caught) {
      signOut();
      setError(
        caught instanceof ApiProblem && caught.status === 401
          ? new Error("That key is not accepted (SCHEDULER_API_KEYS lists the keys).")
          : caught,
      );
    }
  };
  return (
    <>
      <h1 tabIndex={-1}>Sign in</h1>
      <form onSubmit={(event) => void submit(event)} aria-label="Sign in with an API key">
        <label for="api-key">API key</label>
        <span class="hint" id="api-key-hint">
          A key from the server's SCHEDULER_API_KEYS; the sandbox accepts local-dev-key when none
          are set.
        </span>
        <input
          id="api-key"
          name="key"
          type="password"
          autoComplete="off"
          aria-describedby="api-key-hint"
          value={key}
          onInput={(event) => setKey(event.currentTarget.value)}
        />
        <ErrorMessage error={error} />
        <button type="submit">Sign in</button>
      </form>
    </>
  );
}
