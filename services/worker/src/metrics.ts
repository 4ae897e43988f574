import { readFileSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import type { JetStreamClient } from '@nats-io/jetstream';
import {
  MAX_METRIC_LINE_BYTES,
  MAX_METRIC_POINTS,
  METRIC_PREFIX,
  parseMetricJson,
  retry,
  type MetricPoint,
  type MetricSource,
} from '@trainyard/events';
import { FileTail } from '@trainyard/runtime';
import { LineCutter } from './line-cutter.ts';

const PREFIX = Buffer.from(METRIC_PREFIX);
const FLUSH_MS = 1_000;
const BATCH_POINTS = 500;
/** Well under the 1 MiB a NATS server takes in one message by default. */
const BATCH_BYTES = 256 * 1024;
const FILE_TAIL_MS = 250;
/** The most of its metrics file an attempt has read: enough for every point it may keep. */
const MAX_FILE_BYTES = MAX_METRIC_POINTS * MAX_METRIC_LINE_BYTES;
/** Lines that are not metrics after which a metrics file is read no further. */
const MAX_SKIPPED_LINES = 10_000;
/** The most of the output read again after a worker restart. */
const MAX_RESCAN_BYTES = 64 * 1024 ** 2;
const RESCAN_CHUNK = 1024 ** 2;
/** How long the end of an attempt waits for its last points to be sent. */
const END_WAIT_MS = 30_000;

export interface MetricsLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** How far the points sent so far go: every line before these places was read and its point sent. */
interface Progress {
  output: number;
  file: number;
  taken: number;
}

const NO_PROGRESS: Progress = { output: 0, file: 0, taken: 0 };

/** What a progress file records; nothing when there is none, or it cannot be read. */
function readProgress(file: string): Progress {
  try {
    const p = JSON.parse(readFileSync(file, 'utf8')) as Partial<Progress>;
    const whole = (n: unknown) =>
      Number.isSafeInteger(n) && (n as number) >= 0 ? (n as number) : 0;
    return { output: whole(p.output), file: whole(p.file), taken: whole(p.taken) };
  } catch {
    return NO_PROGRESS;
  }
}

/**
 * Reads one attempt's training metrics, from `TRAINYARD_METRIC {json}` lines in its output and
 * from the JSON lines its metrics file holds, and publishes them in batches on the attempt's
 * metrics subject. Each point is named by its source and where its line starts there, so one
 * read twice (after a worker restart, or a publish whose answer was lost) is kept once. At most
 * `MAX_METRIC_POINTS` are taken; lines that are not metrics are counted and skipped. How far the
 * points sent go is kept in `progressFile` (the worker's own), for a worker that restarts.
 */
export class MetricsCollector {
  #batch: MetricPoint[] = [];
  #batchBytes = 0;
  #taken: number;
  #skipped = 0;
  #full = false;
  #fileStopped = false;
  #timer: NodeJS.Timeout | undefined;
  #sending: Promise<void> = Promise.resolve();
  #unsent = 0;
  readonly #output: LineCutter;
  readonly #fileLines: LineCutter;
  readonly #file: FileTail | null;
  readonly #giveUp = new AbortController();
  readonly #signal: AbortSignal;

  /**
   * `file` is the attempt's metrics file on the worker's side; `resumed`, that a worker before
   * this one read the attempt's metrics as far as `progressFile` says. Publishing stops when
   * `signal` aborts (the worker stops).
   */
  constructor(
    private readonly js: JetStreamClient,
    private readonly subject: string,
    private readonly log: MetricsLog,
    private readonly opts: {
      file?: string;
      progressFile: string;
      resumed?: boolean;
      signal?: AbortSignal;
    },
  ) {
    this.#signal = opts.signal
      ? AbortSignal.any([opts.signal, this.#giveUp.signal])
      : this.#giveUp.signal;
    const from = opts.resumed ? readProgress(opts.progressFile) : NO_PROGRESS;
    this.#taken = from.taken;
    this.#full = this.#taken >= MAX_METRIC_POINTS;
    this.#output = new LineCutter((line, offset) => this.#take('output', line, offset), {
      prefix: PREFIX,
      onSkip: () => this.#skipped++,
    });
    this.#output.moveTo(from.output, false);
    this.#fileLines = new LineCutter((line, offset) => this.#take('file', line, offset), {
      onSkip: () => this.#skipLine(),
    });
    this.#fileLines.moveTo(from.file, false);
    this.#file = opts.file
      ? new FileTail(
          opts.file,
          (chunk) => {
            if (!this.#full && !this.#fileStopped) this.#fileLines.write(chunk);
          },
          {
            offset: from.file,
            everyMs: FILE_TAIL_MS,
            maxBytes: MAX_FILE_BYTES,
            writtenByJob: true,
          },
        )
      : null;
  }

  /** A chunk of the attempt's output, in order. */
  output(chunk: Buffer): void {
    if (!this.#full) this.#output.write(chunk);
  }

  /**
   * Reads the metrics in the attempt's output again, from `file` where the runtime keeps it, from
   * where the points sent go up to `upTo` (at most `MAX_RESCAN_BYTES` of it): after a worker
   * restart, those the worker before had read but not sent. Call it before any `output`. Where
   * the file cannot be read, only points still to come are taken.
   */
  async rescan(file: string, upTo: number): Promise<void> {
    if (upTo - this.#output.offset > MAX_RESCAN_BYTES)
      this.#output.moveTo(upTo - MAX_RESCAN_BYTES, true);
    try {
      const handle = await open(file, 'r');
      try {
        const buffer = Buffer.alloc(RESCAN_CHUNK);
        while (!this.#full && this.#output.offset < upTo) {
          const want = Math.min(buffer.length, upTo - this.#output.offset);
          const { bytesRead } = await handle.read(buffer, 0, want, this.#output.offset);
          if (bytesRead === 0) break;
          this.#output.write(buffer.subarray(0, bytesRead));
        }
      } finally {
        await handle.close();
      }
    } catch (err) {
      this.log.warn({ err, subject: this.subject }, 'could not read the output again for metrics');
    }
    if (this.#output.offset !== upTo) this.#output.moveTo(upTo, true);
  }

  #skipLine(): void {
    if (++this.#skipped < MAX_SKIPPED_LINES || this.#fileStopped) return;
    this.#fileStopped = true;
    void this.#file?.close(false);
  }

  #take(source: MetricSource, line: string, offset: number): void {
    if (this.#full || (source === 'file' && this.#fileStopped)) return;
    const text = line.trim();
    if (text === '') return;
    const parsed = text.startsWith('{') ? parseMetricJson(text) : null;
    if (!parsed?.ok) {
      if (source === 'file') this.#skipLine();
      else this.#skipped++;
      return;
    }
    const point: MetricPoint = { source, offset, at: new Date().toISOString(), ...parsed.point };
    this.#batch.push(point);
    this.#batchBytes += JSON.stringify(point).length;
    if (++this.#taken >= MAX_METRIC_POINTS) {
      this.#full = true;
      void this.#file?.close(false);
    }
    if (this.#batch.length >= BATCH_POINTS || this.#batchBytes >= BATCH_BYTES) void this.#flush();
    else this.#timer ??= setTimeout(() => void this.#flush(), FLUSH_MS);
  }

  #flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#batch.length === 0) return this.#sending;
    const points = this.#batch;
    const reached: Progress = {
      output: this.#output.lineStart,
      file: this.#fileLines.lineStart,
      taken: this.#taken,
    };
    this.#batch = [];
    this.#batchBytes = 0;
    this.#unsent += points.length;
    const data = JSON.stringify({ points });
    this.#sending = this.#sending.then(async () => {
      try {
        await retry(() => this.js.publish(this.subject, data, { timeout: 5_000 }), {
          attempts: Infinity,
          baseMs: 100,
          maxMs: 5_000,
          signal: this.#signal,
        });
        this.#unsent -= points.length;
        writeFileSync(this.opts.progressFile, JSON.stringify(reached), { mode: 0o600 });
      } catch (err) {
        this.log.warn({ err, subject: this.subject, points: points.length }, 'metrics not sent');
      }
    });
    return this.#sending;
  }

  /**
   * Reads what the metrics file holds now and publishes every point taken, waiting at most
   * `END_WAIT_MS` for them to be sent: the end of the attempt is not held back for them.
   */
  async end(): Promise<void> {
    await this.#file?.close(!this.#full && !this.#fileStopped);
    const sent = this.#flush();
    const waited = setTimeout(() => this.#giveUp.abort(), END_WAIT_MS);
    await sent;
    clearTimeout(waited);
    if (this.#full || this.#skipped > 0 || this.#unsent > 0) {
      this.log.info(
        { subject: this.subject, taken: this.#taken, skipped: this.#skipped, unsent: this.#unsent },
        this.#full
          ? `metrics after the first ${MAX_METRIC_POINTS} were not kept`
          : 'metrics: some lines were skipped or not sent',
      );
    }
  }
}
