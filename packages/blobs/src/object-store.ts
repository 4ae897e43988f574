import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { Objm, type ObjectResult, type ObjectStore } from '@nats-io/obj';
import { assertSubjectToken, isTransient, retryTransient, type BlobRef } from '@trainyard/events';
import { hashing } from './hashing.ts';
import { resumableRead } from './resumable.ts';
import type { BlobPart, BlobStore } from './types.ts';

/** A read that gets no bytes for this long is opened again, at most `READ_OPENS` times in all. */
const READ_IDLE_MS = 10_000;
const READ_OPENS = 5;

/**
 * How a store reads objects: through an ordered consumer (resumed after a failover), or by
 * direct gets, for a login that may make no consumer.
 */
export type BlobReads = 'consumer' | 'direct';

const isNotFound = (err: unknown) => /not found/i.test(String((err as Error).message));

/** The object store bucket of worker `name`: only it may write there. */
export const workerBucket = (name: string) => `ty_w_${assertSubjectToken(name, 'worker')}`;

/** Makes worker `name`'s bucket, with a login that may make streams, before the worker joins. */
export async function ensureWorkerBucket(
  js: JetStreamClient,
  name: string,
  replicas = 1,
): Promise<void> {
  await retryTransient(`make the object store bucket of worker ${name}`, () =>
    new Objm(js).create(workerBucket(name), { replicas }),
  );
}

/** Blobs in a JetStream object store: the embedded default, nothing else to run. */
export class JetStreamBlobStore implements BlobStore {
  readonly kind = 'nats';
  readonly #workers = new Map<string, JetStreamBlobStore>();
  #jsm: Promise<JetStreamManager> | undefined;
  /** One manager for the store's direct reads: making one asks the server for its account. */
  #manager(): Promise<JetStreamManager> {
    this.#jsm ??= this.js.jetstreamManager().catch((err: unknown) => {
      this.#jsm = undefined;
      throw err;
    });
    return this.#jsm;
  }
  private constructor(
    private readonly os: ObjectStore,
    private readonly js: JetStreamClient,
    private readonly bucket: string,
    private readonly reads: BlobReads,
  ) {}

  /**
   * Opens the first of `buckets` that is there, creating the last when `manage` (a worker,
   * allowed no stream of its own, opens those the control plane made).
   */
  static async open(
    js: JetStreamClient,
    buckets: string | string[] = 'trainyard',
    replicas = 1,
    manage = true,
    reads: BlobReads = 'consumer',
  ): Promise<JetStreamBlobStore> {
    const names = typeof buckets === 'string' ? [buckets] : buckets;
    for (const [i, bucket] of names.entries()) {
      const last = i === names.length - 1;
      const os = await retryTransient(`open the object store ${bucket}`, () =>
        last && manage
          ? new Objm(js).create(bucket, { replicas })
          : new Objm(js).open(bucket).catch((err: unknown) => {
              if (!last && isNotFound(err)) return null;
              throw err;
            }),
      );
      if (os) return new JetStreamBlobStore(os, js, bucket, reads);
    }
    throw new Error('no object store bucket to open');
  }

  async ofWorker(name: string, opts: { orShared?: boolean } = {}): Promise<BlobStore> {
    const kept = this.#workers.get(name);
    if (kept) return kept;
    const bucket = workerBucket(name);
    const os = await retryTransient(`open the object store ${bucket}`, () =>
      new Objm(this.js).open(bucket).catch((err: unknown) => {
        if (isNotFound(err)) return null;
        throw err;
      }),
    );
    if (!os) {
      if (opts.orShared) return this;
      throw new Error(
        `worker ${name} has no object store bucket of its own (${bucket}): the control plane makes it when the worker enrols, so enrol it with a token (\`trainyard worker token create ${name}\`)`,
      );
    }
    const store = new JetStreamBlobStore(os, this.js, bucket, this.reads);
    this.#workers.set(name, store);
    return store;
  }

  /** Bytes are sent again after a transient error; a stream cannot be (`putFile` reopens). */
  async put(key: string, data: Readable | Uint8Array): Promise<BlobRef> {
    const once = async () => {
      const hashed = hashing(data);
      const web = Readable.toWeb(hashed) as unknown as ReadableStream<Uint8Array>;
      await this.os.put({ name: key }, web);
      return { key, sizeBytes: hashed.sizeBytes, sha256: hashed.digest() };
    };
    return data instanceof Uint8Array ? retryTransient(`store ${key}`, once) : once();
  }

  /**
   * A read that goes quiet (its server died mid-read) is opened again and resumes where it
   * stopped, as long as the object is still the one it started on.
   */
  async get(key: string): Promise<Readable | null> {
    if (this.reads === 'direct') return this.#getDirect(key);
    const open = () =>
      retryTransient(`read ${key}`, async () => {
        const info = await this.os.info(key);
        return info && !info.deleted ? this.os.get(key) : null;
      });
    const first = await open();
    if (!first) return null;
    const data = (r: ObjectResult) => r.data as unknown as WebReadableStream<Uint8Array>;
    return resumableRead(
      `read ${key}`,
      data(first),
      async () => {
        const again = await open();
        if (again && again.info.digest !== first.info.digest) {
          throw new Error(`${key} was replaced while it was read`);
        }
        return again && data(again);
      },
      { idleMs: READ_IDLE_MS, opens: READ_OPENS, retryable: isTransient },
    );
  }

  /**
   * Reads an object a chunk at a time, each a direct get of the next chunk of the object as it
   * was when the read began: no consumer is made, so a login that may not make consumers (a
   * worker: a consumer delivers wherever its maker says) reads too. Each get is tried again on
   * its own after a transient error; an object replaced meanwhile fails the read.
   */
  async #getDirect(key: string): Promise<Readable | null> {
    const found = await retryTransient(`read ${key}`, () => this.os.info(key));
    if (!found || found.deleted) return null;
    const info = found;
    const jsm = await this.#manager();
    const stream = `OBJ_${this.bucket}`;
    const subject = `$O.${this.bucket}.C.${info.nuid}`;
    async function* chunks(): AsyncGenerator<Uint8Array> {
      let seq = 1;
      let read = 0;
      for (let n = 0; n < info.chunks; n++) {
        const msg = await retryTransient(`read ${key}`, () =>
          jsm.direct.getMessage(stream, { seq, next_by_subj: subject }),
        );
        if (!msg) throw new Error(`${key} was replaced while it was read`);
        seq = msg.seq + 1;
        read += msg.data.length;
        yield msg.data;
      }
      if (read !== info.size) throw new Error(`${key} was replaced while it was read`);
    }
    return Readable.from(chunks(), { objectMode: false });
  }

  /**
   * A chunk of the object as it is now: the cursor holds the sequence to look from and the bytes
   * read so far, and the lookup is bound to the object's own chunk subject, so no cursor reads
   * anything else.
   */
  async readPart(key: string, cursor: string | null): Promise<BlobPart | null> {
    const info = await retryTransient(`read ${key}`, () => this.os.info(key));
    if (!info || info.deleted) return null;
    const at = /^(\d{1,15})\.(\d{1,15})$/.exec(cursor ?? '1.0');
    if (!at) return null;
    const read = Number(at[2]);
    if (read >= info.size && info.size > 0) return null;
    if (info.size === 0) return { data: new Uint8Array(), next: null };
    const jsm = await this.#manager();
    const msg = await retryTransient(`read ${key}`, () =>
      jsm.direct.getMessage(`OBJ_${this.bucket}`, {
        seq: Number(at[1]),
        next_by_subj: `$O.${this.bucket}.C.${info.nuid}`,
      }),
    );
    if (!msg) return null;
    const total = read + msg.data.length;
    return { data: msg.data, next: total < info.size ? `${msg.seq + 1}.${total}` : null };
  }

  async stat(key: string): Promise<{ sizeBytes: number } | null> {
    const info = await retryTransient(`read ${key}`, () => this.os.info(key));
    return info && !info.deleted ? { sizeBytes: info.size } : null;
  }

  async delete(key: string): Promise<void> {
    await retryTransient(`delete ${key}`, async () => {
      const info = await this.os.info(key);
      if (info && !info.deleted) await this.os.delete(key);
    });
  }
}
