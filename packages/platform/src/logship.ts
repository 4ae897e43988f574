import { createWriteStream, type WriteStream } from 'node:fs';
import type { JetStreamClient } from '@nats-io/jetstream';
import { Subjects } from '@trainyard/events';
import { BlobKeys, putFile, type BlobStore } from './blob/types.ts';

const FLUSH_MS = 100;
const MAX_CHUNK = 64 * 1024;
const PUBLISH_TRIES = 3;

/**
 * Ships one attempt's output to the live log stream in small batches, and keeps a copy on
 * local disk that is archived to the blob store when the attempt ends.
 */
export class LogShipper {
  #buffer: Buffer[] = [];
  #bytes = 0;
  #written = 0;
  /** Bytes the live stream never took (the archived copy still has them). */
  droppedBytes = 0;
  #timer: NodeJS.Timeout | undefined;
  #inflight: Promise<unknown> = Promise.resolve();
  #file: WriteStream | null = null;
  readonly #subject: string;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jobId: string,
    private readonly attempt: number,
    private readonly localPath: string,
  ) {
    this.#subject = Subjects.attemptLogs(jobId, attempt);
  }

  write(chunk: Buffer): void {
    this.#file ??= createWriteStream(this.localPath, { flags: 'a' });
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

  async #publish(data: Uint8Array): Promise<void> {
    for (let offset = 0; offset < data.length; offset += MAX_CHUNK) {
      const chunk = data.subarray(offset, offset + MAX_CHUNK);
      for (let tries = 1; ; tries++) {
        try {
          await this.js.publish(this.#subject, chunk);
          break;
        } catch {
          if (tries >= PUBLISH_TRIES) {
            this.droppedBytes += chunk.length;
            break;
          }
          await new Promise((r) => setTimeout(r, 200 * tries));
        }
      }
    }
  }

  /** Publishes what is buffered and closes the local copy. Call it before the attempt's last event. */
  async end(): Promise<void> {
    await this.flush();
    const file = this.#file;
    if (file) await new Promise<void>((resolve) => file.end(resolve));
  }

  /** Keeps the local copy in the blob store, for when the live log has aged out. */
  async archive(blobs: BlobStore): Promise<void> {
    if (this.#written === 0) return;
    await putFile(blobs, BlobKeys.log(this.jobId, this.attempt), this.localPath);
  }
}
