import { retry } from '@trainyard/events';
import type { ApiClient } from './client.ts';
import { CliError } from './errors.ts';
import { cleanLog, cleanName, safeJson } from './output.ts';
import { readEvents } from './sse.ts';

/** Who ran an attempt, as the API's `attempt` event says. */
interface AttemptHeader {
  attempt: number;
  build: boolean;
  workerId: string | null;
  gpus: number[];
}

/** How the job stood when its log ended, as the API's `end` event says. */
export interface LogEnd {
  status: string;
  ended: boolean;
  exitCode: number | null;
  failure: { kind: string; reason: string; message: string } | null;
}

export interface LogOptions {
  follow: boolean;
  /** Whose log: a job's (the default), or a session's (the build of its image). */
  of?: 'job' | 'session';
  /** Print only the last N lines of what is there, then follow on from it. */
  tail?: number;
  /** One JSON object a line for each event, instead of text. */
  json?: boolean;
  /** Print the log as the job wrote it, escape sequences and all. */
  raw?: boolean;
  /** A gang job's member of this rank (1 and on): its own log. */
  rank?: number;
  write?: (text: string) => void;
  /** Where word of a lost connection goes. */
  note?: (text: string) => void;
}

/** How many times a dropped stream is opened again before giving up, and the longest wait. */
const RECONNECTS = 12;
const MAX_WAIT_MS = 5_000;

const PASSING = new Set([
  'UNREACHABLE',
  'STREAM_ENDED',
  'EVENT_LOG_UNAVAILABLE',
  'PROJECTIONS_UNAVAILABLE',
  'PROJECTION_TIMEOUT',
  'HTTP_502',
  'HTTP_503',
  'HTTP_504',
]);

/**
 * Whether a broken stream may mend: the API was out of reach, the connection dropped while the
 * body was read (fetch raises a TypeError), or the server said it was briefly unavailable (its
 * read model among it).
 */
function worthReconnecting(err: unknown): boolean {
  if (err instanceof CliError) return PASSING.has(err.code);
  return err instanceof TypeError;
}

/** The line that opens an attempt's part of the log. */
export function attemptLine(h: AttemptHeader): string {
  if (h.build) return '--- build ---\n';
  const where = h.gpus.length ? `gpu ${h.gpus.join(',')}` : 'cpu';
  return `--- attempt ${h.attempt} on worker ${h.workerId ?? '?'} (${where}) ---\n`;
}

/** Keeps the last `n` lines of what passes through it. */
class LastLines {
  /** The last complete lines, and the line still open (no newline yet). */
  #lines: string[] = [];
  #open = '';
  constructor(private readonly n: number) {}
  push(text: string) {
    const parts = (this.#open + text).split('\n');
    this.#open = parts.pop() ?? '';
    this.#lines.push(...parts);
    if (this.#lines.length > this.n) this.#lines.splice(0, this.#lines.length - this.n);
  }

  text(): string {
    const keep = this.#open ? this.n - 1 : this.n;
    const complete = keep > 0 ? this.#lines.slice(-keep) : [];
    return complete.map((l) => `${l}\n`).join('') + (this.n > 0 ? this.#open : '');
  }
}

/**
 * Prints a job's log (or a session's build) with a header line for each attempt; with
 * `follow`, until the job ends (the session's build),
 * opening the stream again where it broke off if the connection drops (nothing is printed
 * twice). Returns how the job stood at the end of the log, or null when the stream ended
 * without saying.
 */
export async function printLog(
  client: ApiClient,
  id: string,
  opts: LogOptions,
): Promise<LogEnd | null> {
  const write = opts.write ?? ((t: string) => void process.stdout.write(t));
  const note = opts.note ?? ((t: string) => void process.stderr.write(t));
  const tail = opts.tail !== undefined ? new LastLines(opts.tail) : null;
  let caughtUp = tail === null;
  const out = (text: string) => (caughtUp ? write(text) : tail!.push(text));
  let lastId: string | undefined;
  let printedAttempt = -1;
  const reconnecting = (err: unknown) => opts.follow === true && worthReconnecting(err);
  const of = opts.of ?? 'job';
  const read = async (): Promise<LogEnd | null> => {
    const query = new URLSearchParams({
      ...(opts.follow && { follow: 'true' }),
      ...(opts.rank !== undefined && { rank: String(opts.rank) }),
    }).toString();
    const res = await client.request(
      `/v1/${of}s/${encodeURIComponent(id)}/logs${query ? `?${query}` : ''}`,
      {
        headers: {
          accept: 'text/event-stream',
          ...(lastId !== undefined && { 'last-event-id': lastId }),
        },
      },
    );
    if (!res.body) return null;
    for await (const ev of readEvents(res.body)) {
      const data = JSON.parse(ev.data) as unknown;
      if (opts.json) {
        if (ev.event !== 'caught-up')
          write(`${safeJson({ type: ev.event, data }).replace(/\n\s*/g, '')}\n`);
      } else if (ev.event === 'attempt') {
        const h = data as AttemptHeader;
        if (h.attempt !== printedAttempt) out(attemptLine(h));
        printedAttempt = h.attempt;
      } else if (ev.event === 'log') out(opts.raw ? (data as string) : cleanLog(data as string));
      else if (ev.event === 'caught-up' && !caughtUp) {
        caughtUp = true;
        write(tail!.text());
      }
      if (ev.id !== undefined) lastId = ev.id;
      if (ev.event === 'end') {
        if (!caughtUp) write(tail!.text());
        return data as LogEnd;
      }
    }
    if (!opts.follow) return null;
    throw new CliError(`the log stream ended before the ${of} did`, 'STREAM_ENDED');
  };
  try {
    return await retry(read, {
      attempts: RECONNECTS + 1,
      baseMs: 250,
      maxMs: MAX_WAIT_MS,
      retryable: reconnecting,
      onRetry: (_, __, wait) =>
        note(`(connection to the log lost; reconnecting in ${(wait / 1000).toFixed(1)} s)\n`),
    });
  } catch (err) {
    if (!reconnecting(err)) throw err;
    throw new CliError(
      `lost the log of ${id} and could not get it back after ${RECONNECTS} tries: ${(err as Error).message}`,
      'STREAM_LOST',
      1,
      { cause: err },
    );
  }
}

/** The exit status for how a job ended: 0 when it succeeded, its exit code or 1 otherwise. */
export function exitStatusOf(end: LogEnd | null): number {
  if (!end) return 1;
  if (end.status === 'succeeded') return 0;
  return end.exitCode && end.exitCode > 0 && end.exitCode < 256 ? end.exitCode : 1;
}

/** One line on how the job ended, for stderr. */
export function outcomeLine(id: string, end: LogEnd | null): string {
  if (!end) return `job ${id}: the log ended without its outcome`;
  const exit = end.exitCode !== null ? ` (exit ${end.exitCode})` : '';
  const why = end.failure ? `: ${end.failure.reason}: ${cleanName(end.failure.message)}` : '';
  return `job ${id} ${end.status}${exit}${why}`;
}
