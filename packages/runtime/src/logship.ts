import { createReadStream, createWriteStream, statSync, type WriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { retry, retryTransient, Streams, Subjects } from '@trainyard/events';
import { BlobKeys, putFile, type BlobStore } from '@trainyard/blobs';

const FLUSH_MS = 100;
const MAX_CHUNK = 64 * 1024;
/** Output held back while NATS is away; beyond it the oldest leaves the live log (not the archive). */
const MAX_PENDING_BYTES = 64 * 1024 ** 2;
const MAX_BACKOFF_MS = 5_000;

/** What an attempt's log says, once, where it reaches its limit of `limitBytes`. */
export function logLimitNote(limitBytes: number): string {
  const mib = Math.round(limitBytes / 1024 ** 2);
  const dropped = 'what the job wrote after that is not kept';
  return `\n[trainyard] the log reached its limit of ${mib} MiB: ${dropped}\n`;
}

/** The first `limitBytes` of the file at `path`, then the note that says where it was cut. */
async function* cutAt(path: string, limitBytes: number): AsyncGenerator<Buffer> {
  yield* createReadStream(path, { start: 0, end: limitBytes - 1 }) as AsyncIterable<Buffer>;
  yield Buffer.from(logLimitNote(limitBytes));
}

/**
 * Ships one attempt's output to the live log stream in small batches, and keeps a copy on
 * local disk that is archived to the blob store when the attempt ends. While NATS is away it
 * holds the output back (bounded) and sends it, in order, once NATS is back.
 */
export class LogShipper {
  #buffer: Buffer[] = [];
  #bytes = 0;
  /** Where the first buffered byte is in the attempt's output: each chunk's msg id. */
  #bufferStart = 0;
  #written = 0;
  /** Bytes the live stream never took (the archived copy still has them). */
  droppedBytes = 0;
  #timer: NodeJS.Timeout | undefined;
  #inflight: Promise<unknown> = Promise.resolve();
  #publishing = false;
  #file: WriteStream | null = null;
  readonly #subject: string;
  readonly #idPrefix: string;

  readonly #keepsCopy: boolean;

  readonly #archiveKey: string;
  readonly #limitBytes: number | undefined;

  /**
   * `localPath` is the copy archived at the end: the shipper writes it, unless `writtenBy` is
   * `'process'` (the process writes its output there itself). `offset` is where in the output
   * the first chunk written starts: after a worker restart, what the live log already holds.
   * `workerId` is the worker that runs the attempt; a build (attempt 0) has none.
   */
  constructor(
    private readonly js: JetStreamClient,
    private readonly jobId: string,
    private readonly attempt: number,
    private readonly localPath: string,
    opts: {
      writtenBy?: 'shipper' | 'process';
      offset?: number;
      /** The worker that runs the attempt and the attempt's id; a build has neither. */
      workerId?: string;
      attemptId?: string;
      /** A gang's member of rank 1 and on: its log is archived apart from rank 0's. */
      rank?: number;
      /** How much of a log the process writes is kept (see `Runtime.logLimitBytes`). */
      limitBytes?: number;
    } = {},
  ) {
    this.#archiveKey = opts.rank
      ? BlobKeys.memberLog(jobId, attempt, opts.rank)
      : BlobKeys.log(jobId, attempt);
    this.#subject = Subjects.attemptLogs(jobId, attempt, opts.workerId ?? null);
    // Msg ids are unique across the stream: an attempt's are named by its id, which no other
    // worker knows beforehand, so that none can take them first and have its chunks dropped.
    this.#idPrefix = opts.attemptId ?? this.#subject;
    this.#keepsCopy = (opts.writtenBy ?? 'shipper') === 'shipper';
    this.#bufferStart = opts.offset ?? 0;
    this.#limitBytes = opts.limitBytes;
  }

  write(chunk: Buffer): void {
    if (this.#keepsCopy) {
      this.#file ??= createWriteStream(this.localPath, { flags: 'a' });
      this.#file.write(chunk);
    }
    this.#written += chunk.length;
    this.#buffer.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes > MAX_PENDING_BYTES && this.#buffer.length > 1) {
      const oldest = this.#buffer.shift()!;
      this.#bytes -= oldest.length;
      this.#bufferStart += oldest.length;
      this.droppedBytes += oldest.length;
    }
    if (this.#bytes >= MAX_CHUNK && !this.#publishing) void this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Publishes what is buffered, in order; while a publish runs, the running drain takes it. */
  flush(): Promise<unknown> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#publishing || this.#bytes === 0) return this.#inflight;
    this.#publishing = true;
    this.#inflight = this.#drain().finally(() => (this.#publishing = false));
    return this.#inflight;
  }

  async #drain(): Promise<void> {
    while (this.#bytes > 0) {
      const data = Buffer.concat(this.#buffer);
      const start = this.#bufferStart;
      this.#buffer = [];
      this.#bytes = 0;
      this.#bufferStart += data.length;
      await this.#publish(data, start);
    }
  }

  /**
   * Publishes one batch, trying again until NATS takes it. Each chunk's msg id is its place in
   * the output, so a chunk whose answer was lost and is sent again lands once.
   */
  async #publish(data: Uint8Array, start: number): Promise<void> {
    for (let offset = 0; offset < data.length; offset += MAX_CHUNK) {
      const chunk = data.subarray(offset, offset + MAX_CHUNK);
      const msgID = `${this.#idPrefix}@${start + offset}`;
      await retry(() => this.js.publish(this.#subject, chunk, { msgID, timeout: 5_000 }), {
        attempts: Infinity,
        baseMs: 100,
        maxMs: MAX_BACKOFF_MS,
      });
    }
  }

  /** Publishes what is buffered and closes the local copy. Call it before the attempt's last event. */
  async end(): Promise<void> {
    while (this.#bytes > 0 || this.#publishing) await this.flush();
    const file = this.#file;
    if (file) await new Promise<void>((resolve) => file.end(resolve));
  }

  /**
   * Keeps the local copy in the blob store, for when the live log has aged out: of a log the
   * process wrote, no more than its limit and the note that says so, as the live log has it.
   */
  async archive(blobs: BlobStore): Promise<void> {
    const size = this.#keepsCopy ? this.#written : sizeOf(this.localPath);
    if (size === 0) return;
    const limit = this.#keepsCopy ? undefined : this.#limitBytes;
    if (limit === undefined || size <= limit) {
      await putFile(blobs, this.#archiveKey, this.localPath);
      return;
    }
    const bytes = limit + Buffer.byteLength(logLimitNote(limit));
    await retryTransient(`store ${this.#archiveKey}`, () =>
      blobs.put(this.#archiveKey, Readable.from(cutAt(this.localPath, limit)), bytes),
    );
  }
}

/** A local file's size; 0 when there is none. A stat on local disk needs no thread-pool trip. */
function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * How many bytes of an attempt's output the live log holds: where its newest chunk starts (its
 * msg id says) plus its length. 0 when it holds none.
 */
export async function shippedBytes(
  bus: { jsm: JetStreamManager },
  jobId: string,
  attempt: number,
  workerId: string,
): Promise<number> {
  const subject = Subjects.attemptLogs(jobId, attempt, workerId);
  // A direct get by subject names the subject in the call, where a worker's login allows it.
  const last = await retryTransient(`read the log of ${jobId}`, () =>
    bus.jsm.direct.getMessage(Streams.logs, { last_by_subj: subject }),
  );
  const start = Number(last?.header?.get('Nats-Msg-Id')?.split('@').pop());
  return last && Number.isInteger(start) ? start + last.data.length : 0;
}
