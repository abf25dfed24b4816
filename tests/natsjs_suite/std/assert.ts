// Minimal stand-in for the @std/assert functions nats.js's tests call (JSR is unreachable here).
import { isDeepStrictEqual, inspect } from "node:util";

export class AssertionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AssertionError";
  }
}

function show(v: unknown): string {
  return inspect(v, { depth: 6, colors: false });
}

function loose(a: unknown, b: unknown): boolean {
  // @std's equal compares Maps/Sets/Dates/typed arrays structurally, ignoring prototypes of
  // plain objects; node's strict deep equal is close enough except for class instances.
  if (isDeepStrictEqual(a, b)) return true;
  if (a && b && typeof a === "object" && typeof b === "object") {
    if (a instanceof Uint8Array && b instanceof Uint8Array) {
      return a.length === b.length && a.every((x, i) => x === b[i]);
    }
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    if (a instanceof Map || b instanceof Map || a instanceof Set || b instanceof Set) return false;
    const ka = Object.keys(a as object).filter((k) => (a as any)[k] !== undefined);
    const kb = Object.keys(b as object).filter((k) => (b as any)[k] !== undefined);
    if (ka.length !== kb.length) return false;
    return ka.every((k) => loose((a as any)[k], (b as any)[k]));
  }
  return Number.isNaN(a) && Number.isNaN(b);
}

export function equal(a: unknown, b: unknown): boolean {
  return loose(a, b);
}

export function assert(expr: unknown, msg = ""): asserts expr {
  if (!expr) throw new AssertionError(msg || "Expected expression to be truthy");
}

export function assertFalse(expr: unknown, msg = ""): void {
  if (expr) throw new AssertionError(msg || "Expected expression to be falsy");
}

export function assertEquals<T>(actual: T, expected: T, msg?: string): void {
  if (!loose(actual, expected)) {
    throw new AssertionError(
      `${msg ? msg + ": " : ""}Values are not equal.\n  actual: ${show(actual)}\n  expected: ${show(expected)}`,
    );
  }
}

export function assertNotEquals<T>(actual: T, expected: T, msg?: string): void {
  if (loose(actual, expected)) {
    throw new AssertionError(msg || `Expected actual: ${show(actual)} not to be: ${show(expected)}`);
  }
}

export function assertExists<T>(actual: T, msg?: string): asserts actual is NonNullable<T> {
  if (actual === undefined || actual === null) {
    throw new AssertionError(msg || `actual: "${actual}" expected to not be null or undefined`);
  }
}

export function assertAlmostEquals(actual: number, expected: number, tolerance?: number, msg?: string): void {
  const tol = tolerance ?? Math.abs(expected * 1e-7);
  if (Math.abs(actual - expected) > tol) {
    throw new AssertionError(msg || `Expected ${actual} to be close to ${expected} (±${tol})`);
  }
}

export function assertStringIncludes(actual: string, expected: string, msg?: string): void {
  if (!String(actual).includes(expected)) {
    throw new AssertionError(msg || `Expected actual: "${actual}" to contain: "${expected}"`);
  }
}

export function assertMatch(actual: string, expected: RegExp, msg?: string): void {
  if (!expected.test(actual)) {
    throw new AssertionError(msg || `Expected actual: "${actual}" to match: "${expected}"`);
  }
}

export function assertArrayIncludes<T>(actual: ArrayLike<T>, expected: ArrayLike<T>, msg?: string): void {
  const a = Array.from(actual);
  const missing = Array.from(expected).filter((e) => !a.some((x) => loose(x, e)));
  if (missing.length) {
    throw new AssertionError(msg || `Expected ${show(a)} to include ${show(missing)}`);
  }
}

// deno-lint-ignore no-explicit-any
type Ctor = new (...args: any[]) => any;

export function assertInstanceOf(actual: unknown, expected: Ctor, msg?: string): void {
  if (!(actual instanceof expected)) {
    throw new AssertionError(msg || `Expected object to be an instance of "${expected.name}" but was ${show(actual)}`);
  }
}

export function assertIsError(
  error: unknown,
  ErrorClass?: Ctor,
  msgMatches?: string | RegExp,
  msg?: string,
): void {
  if (!(error instanceof Error)) {
    throw new AssertionError(msg || `Expected "error" to be an Error object: ${show(error)}`);
  }
  if (ErrorClass && !(error instanceof ErrorClass)) {
    throw new AssertionError(
      msg || `Expected error to be instance of "${ErrorClass.name}", but was "${error?.constructor?.name}" (${error.message})`,
    );
  }
  if (msgMatches !== undefined) {
    const text = String(error.message);
    const ok = typeof msgMatches === "string" ? text.includes(msgMatches) : msgMatches.test(text);
    if (!ok) {
      throw new AssertionError(msg || `Expected error message to include ${show(msgMatches)}, but got "${text}"`);
    }
  }
}

export function fail(msg?: string): never {
  throw new AssertionError(`Failed assertion${msg ? `: ${msg}` : "."}`);
}

function errorArgs(a?: unknown, b?: unknown, c?: string): [Ctor | undefined, string | undefined, string | undefined] {
  if (typeof a === "function") return [a as Ctor, b as string | undefined, c];
  return [undefined, undefined, a as string | undefined];
}

export function assertThrows(fn: () => unknown, a?: unknown, b?: unknown, c?: string): unknown {
  const [cls, includes, msg] = errorArgs(a, b, c);
  try {
    fn();
  } catch (err) {
    if (cls) assertIsError(err, cls, includes, msg);
    return err;
  }
  throw new AssertionError(msg || "Expected function to throw.");
}

export async function assertRejects(fn: () => PromiseLike<unknown>, a?: unknown, b?: unknown, c?: string): Promise<unknown> {
  const [cls, includes, msg] = errorArgs(a, b, c);
  try {
    await fn();
  } catch (err) {
    if (cls) assertIsError(err, cls, includes, msg);
    return err;
  }
  throw new AssertionError(msg || "Expected function to reject.");
}
