import { CliError } from '../client.ts';

/** A number flag's value; a value that is not a number is refused, naming the flag. */
export function wholeNumber(flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new CliError(`${flag} wants a number, got "${String(value)}"`);
  return n;
}
