// Stand-in for @std/fmt/colors: plain ANSI wrappers.
const wrap = (n: number) => (s: string) => `\x1b[${n}m${s}\x1b[39m`;
export const red = wrap(31), green = wrap(32), yellow = wrap(33), blue = wrap(34);
export const magenta = wrap(35), cyan = wrap(36), white = wrap(37), gray = wrap(90);
export const bold = (s: string) => `\x1b[1m${s}\x1b[22m`;
