import { CliError } from '../client.ts';

/** A number flag's value; a value that is not a number is refused, naming the flag. */
export function wholeNumber(flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new CliError(`${flag} wants a number, got "${String(value)}"`);
  return n;
}

/** `--max-gpus`: a whole number of GPUs, or `none` (null) to lift a quota. */
export function maxGpusFlag(value: string): number | null {
  const given = value.trim();
  if (!/^(\d{1,6}|none)$/i.test(given))
    throw new CliError('--max-gpus wants a whole number of GPUs, or "none"');
  return /^none$/i.test(given) ? null : Number(given);
}

/** "N GPUs at once", or "no GPU quota", for a quota just set. */
export const quotaWords = (maxGpus: number | null): string =>
  maxGpus === null ? 'no GPU quota' : `${maxGpus} GPU${maxGpus === 1 ? '' : 's'} at once`;
