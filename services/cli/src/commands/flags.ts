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

/** `--max-gpu-hours`: a number of GPU-hours a month (to 4 decimals), or `none` (null). */
export function maxGpuHoursFlag(value: string): number | null {
  const given = value.trim();
  if (!/^(\d{1,9}(\.\d{1,4})?|none)$/i.test(given))
    throw new CliError(
      '--max-gpu-hours wants a number of GPU-hours (such as 100 or 0.5), or "none"',
    );
  return /^none$/i.test(given) ? null : Number(given);
}

/** The body of a quota change from `--max-gpus` and `--max-gpu-hours`: one of them at least. */
export function quotaBody(o: { maxGpus?: string; maxGpuHours?: string }) {
  if (o.maxGpus === undefined && o.maxGpuHours === undefined)
    throw new CliError('give --max-gpus, --max-gpu-hours or both');
  return {
    ...(o.maxGpus !== undefined && { maxGpus: maxGpusFlag(o.maxGpus) }),
    ...(o.maxGpuHours !== undefined && { maxGpuHours: maxGpuHoursFlag(o.maxGpuHours) }),
  };
}

/** What a quota change set, in words: `alice may hold 2 GPUs at once and has no GPU-hour quota`. */
export function quotaSetLine(
  who: string,
  set: { maxGpus?: number | null; maxGpuHours?: number | null },
): string {
  const parts = [
    ...(set.maxGpus === undefined
      ? []
      : [set.maxGpus === null ? 'has no GPU quota' : `may hold ${quotaWords(set.maxGpus)}`]),
    ...(set.maxGpuHours === undefined
      ? []
      : [
          set.maxGpuHours === null
            ? 'has no GPU-hour quota'
            : `may take ${set.maxGpuHours} GPU-hours a month`,
        ]),
  ];
  return `${who} ${parts.join(' and ')}`;
}
