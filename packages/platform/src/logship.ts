import { createWriteStream, type WriteStream } from 'node:fs';
import { headers } from '@nats-io/nats-core';
import type { JetStreamClient } from '@nats-io/jetstream';
import { LogHeaders, Subjects } from '@trainyard/events';
import { BlobKeys, putFile, type BlobStore } from './blob/types.ts';

const FLUSH_MS = 100;
const MAX_CHUNK = 64 * 1024;

/**
 * Ships one attempt's output to the live log stream in small batches, and keeps a copy on
 * local disk that is archived to the blob store when the attempt ends.
 */
export class LogShipper {
  #buffer: Buffer[] = [];
  #bytes = 0;
  #written = 0;
  #timer: NodeJS.Timeout | undefined;
  #inflight: Promise<unknown> = Promise.resolve();
  readonly #file: WriteStream;
  readonly #subject: string;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jobId: string,
    private readonly attempt: number,
    private readonly localPath: string,
  ) {
    this.#subject = Subjects.attemptLogs(jobId, attempt);
    this.#file = createWriteStream(localPath, { flags: 'a' });
  }

  write(chunk: Buffer): void {
    this.#file.write(chunk);
    this.#written += chunk.length;
    this.#buffer.push(chunk);
    this.#bytes += chunk.length;
    if (this.#bytes >= MAX_CHUNK) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Publishes what is buffered; publishes stay in order. */
  flush(): Promise<unknown> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#bytes === 0) return this.#inflight;
    const data = Buffer.concat(this.#buffer);
    this.#buffer = [];
    this.#bytes = 0;
    const previous = this.#inflight;
    this.#inflight = previous.then(() => this.#publish(data));
    return this.#inflight;
  }

  async #publish(data: Uint8Array, eof = false): Promise<void> {
    for (let offset = 0; offset < data.length || (eof && offset === 0); offset += MAX_CHUNK) {
      const h = headers();
      if (eof) h.set(LogHeaders.eof, '1');
      await this.js
        .publish(this.#subject, data.subarray(offset, offset + MAX_CHUNK), { headers: h })
        .catch(() => undefined);
      if (eof) break;
    }
  }

  /** Flushes what is buffered and marks the end of the live log. */
  async end(): Promise<void> {
    await this.flush();
    await this.#publish(new Uint8Array(), true);
    await new Promise<void>((resolve) => this.#file.end(resolve));
  }

  /** Keeps the local copy in the blob store, for when the live log has aged out. */
  async archive(blobs: BlobStore): Promise<void> {
    if (this.#written === 0) return;
    await putFile(blobs, BlobKeys.log(this.jobId, this.attempt), this.localPath);
  }
}
