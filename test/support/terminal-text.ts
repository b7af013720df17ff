/**
 * The characters in `line` a terminal acts on: C0 and C1 controls, DEL, bidi overrides and
 * isolates, line separators (what client/cli/output.ts printable escapes).
 */
export const actedOn = (line: string | undefined): string[] =>
  [...(line ?? "")].filter((char) => {
    const code = char.charCodeAt(0);
    return (
      code < 0x20 ||
      (code >= 0x7f && code <= 0x9f) ||
      (code >= 0x202a && code <= 0x202e) ||
      (code >= 0x2066 && code <= 0x2069) ||
      code === 0x2028 ||
      code === 0x2029
    );
  });
