import { expect } from "vitest";

/** Awaits a call that must fail and returns its error, narrowed to the expected class. */
export async function rejection<E extends Error>(
  promise: Promise<unknown>,
  errorClass: abstract new (...args: never[]) => E,
): Promise<E> {
  const error = await promise.then(
    () => new Error("expected the call to be rejected"),
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(errorClass);
  if (!(error instanceof errorClass)) throw error;
  return error;
}
