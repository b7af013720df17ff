/** A handler's wait until `release` is called: held runs end only once the case has looked. */
export function held(): { released: Promise<void>; release: () => void } {
  let release = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { released, release };
}
