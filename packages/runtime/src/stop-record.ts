import { readFileSync, renameSync, writeFileSync } from 'node:fs';

/** This boot of the host: a deadline recorded in another names process groups long gone. */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** The furthest a recorded grace may end from now and still be read as one. */
const LONGEST_GRACE_MS = 24 * 60 * 60 * 1000;

/**
 * Records in `file` when the grace of an attempt's stop ends (ms since the epoch), with the
 * host's boot: written whole (a new file renamed over it), so that a worker that dies as it
 * writes leaves the deadline before or none.
 */
export function recordStop(file: string, until: number): void {
  const next = `${file}.new`;
  writeFileSync(next, `${until} ${bootId()}\n`);
  renameSync(next, file);
}

/**
 * When the grace of the stop recorded in `file` ends; 0 where none was recorded in this boot of
 * the host, or the record is not one `recordStop` writes, or the grace would end implausibly late.
 */
export function recordedStop(file: string | undefined, now = Date.now()): number {
  if (!file) return 0;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return 0;
  }
  const match = /^([1-9]\d{0,14}) (\S+)\n$/.exec(text);
  if (!match || match[2] !== bootId()) return 0;
  const until = Number(match[1]);
  return until <= now + LONGEST_GRACE_MS ? until : 0;
}
