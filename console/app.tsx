import { useEffect, useRef, useState } from "preact/hooks";
import { CALLBACK_PATH, type ConsoleConfig } from "../shared/console/config.js";
import { whenUnauthorized } from "./api.js";
import { currentCredential, finishSignIn, signOut, signOutOfProvider } from "./auth.js";
import { Announcer, ErrorMessage, LivePollInterval } from "./components.js";
import { DeadLettersPage } from "./pages/dead-letters.js";
import { JobPage } from "./pages/job.js";
import { JobsPage } from "./pages/jobs.js";
import { SignInPage } from "./pages/sign-in.js";
import { Link, navigate, useLocation } from "./router.js";

export function App({ config }: { config: ConsoleConfig }) {
  const url = useLocation();
  const [signedIn, setSignedIn] = useState(() => currentCredential() !== null);
  const [callbackError, setCallbackError] = useState<unknown>(null);
  const main = useRef<HTMLElement>(null);

  useEffect(
    () =>
      whenUnauthorized(() => {
        signOut();
        setSignedIn(false);
      }),
    [],
  );

  // A page the browser restores from its back/forward cache comes back as it was left: the tenant
  // it showed on it, and signed in as far as it knows, until its next poll is refused. Back after
  // "Sign out" in a later page of this tab (one reached from /docs) showed the last tenant's jobs to
  // the next person at the screen for those seconds, and the jobs of the one signed in since then.
  // Restored, it asks who is signed in now and, when that is not who was as it was left, starts
  // its page afresh. The same person back from the API reference finds the page as they left it:
  // a create form half filled in, the filter chosen (its polls go on as before).
  const [restores, setRestores] = useState(0);
  useEffect(() => {
    let leftAs: string | null = null;
    const left = () => {
      leftAs = currentCredential()?.token ?? null;
    };
    const restored = (event: PageTransitionEvent) => {
      if (!event.persisted || (currentCredential()?.token ?? null) === leftAs) return;
      setSignedIn(currentCredential() !== null);
      setRestores((count) => count + 1);
    };
    addEventListener("pagehide", left);
    addEventListener("pageshow", restored);
    return () => {
      removeEventListener("pagehide", left);
      removeEventListener("pageshow", restored);
    };
  }, []);

  const path = url.pathname.replace(/\/+$/, "");
  const atCallback = path === CALLBACK_PATH;

  // Back from the identity provider with a code: exchange it once, then go where the user was.
  useEffect(() => {
    if (!atCallback) return;
    // Where sign-in takes no provider, the callback's address (a bookmark, an old history entry,
    // a deployment that signed in with OIDC before) has nothing to finish.
    if (config.auth.kind !== "oidc") {
      navigate("/console", { replace: true });
      return;
    }
    setCallbackError(null);
    finishSignIn(config.auth, url).then((returnTo) => {
      setSignedIn(true);
      navigate(
        returnTo.startsWith("/console") && returnTo !== CALLBACK_PATH ? returnTo : "/console",
        {
          replace: true,
        },
      );
    }, setCallbackError);
  }, [url, config.auth]);

  // A new page: move focus to its heading, so screen readers and keyboards start there.
  useEffect(() => {
    main.current?.querySelector<HTMLElement>("h1")?.focus();
  }, [url.pathname, signedIn, callbackError]);

  const job = /^\/console\/jobs\/([^/]+)$/.exec(path)?.[1];
  let page = null;
  if (atCallback) {
    page =
      config.auth.kind !== "oidc" ? null : callbackError ? (
        <>
          <h1 tabIndex={-1}>Sign-in did not finish</h1>
          <ErrorMessage error={callbackError} />
          <p>
            <Link href="/console">{signedIn ? "Back to the console" : "Back to sign-in"}</Link>
          </p>
        </>
      ) : (
        <h1 tabIndex={-1}>Signing in…</h1>
      );
  } else if (!signedIn) {
    page = <SignInPage auth={config.auth} onSignedIn={() => setSignedIn(true)} />;
  } else if (path === "/console" || path === "/console/jobs") {
    page = <JobsPage jobTypes={config.jobTypes} />;
  } else if (job !== undefined) {
    // Keyed by the job: another job's page starts afresh, not busy with this one's action.
    const id = decodedSegment(job);
    page = <JobPage key={id} id={id} />;
  } else if (path === "/console/dead-letters") {
    page = <DeadLettersPage />;
  } else {
    page = (
      <>
        <h1 tabIndex={-1}>Not found</h1>
        <p>
          The console has no page here. <Link href="/console">All jobs</Link>
        </p>
      </>
    );
  }

  return (
    <LivePollInterval.Provider value={config.pollIntervalMs}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header>
        <nav aria-label="Console">
          <span class="brand">Scheduler</span>
          <Link href="/console">Jobs</Link>
          <Link href="/console/dead-letters">Dead letters</Link>
          <a href="/docs">API reference</a>
          {signedIn && config.auth.kind !== "iam" ? (
            <button
              type="button"
              class="link"
              onClick={() => {
                // The next person at this screen starts on the jobs page, not on a page of this
                // tenant's (its address names a job).
                if (config.auth.kind === "oidc") signOutOfProvider();
                else signOut();
                setSignedIn(false);
                navigate("/console");
              }}
            >
              Sign out{currentCredential()?.who ? ` (${currentCredential()?.who})` : ""}
            </button>
          ) : null}
        </nav>
      </header>
      {/* Keyed by the restores too: a page restored from the cache reads its data again. */}
      <main id="main" ref={main} key={restores}>
        {page}
      </main>
      {/* A new session, a new live region: "Job … created" is not left on the sign-in page. */}
      <Announcer key={`${signedIn ? "signed-in" : "signed-out"} ${restores}`} />
    </LivePollInterval.Provider>
  );
}

/**
 * A path segment as text. A broken escape (a mangled or hostile link, `%E0%A4%A`) makes
 * decodeURIComponent throw, which in rendering left the whole console blank: it stays as written,
 * and the page says there is no such job.
 */
function decodedSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
