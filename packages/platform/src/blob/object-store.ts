import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { JetStreamClient } from '@nats-io/jetstream';
import { Objm, type ObjectStore } from '@nats-io/obj';
import { retryTransient, type BlobRef } from '@trainyard/events';
import { hashing } from './hashing.ts';
import type { BlobStore } from './types.ts';

/** Blobs in a JetStream object store: the embedded default, nothing else to run. */
export class JetStreamBlobStore implements BlobStore {
  readonly kind = 'nats';
  private constructor(private readonly os: ObjectStore) {}

  static async open(
    js: JetStreamClient,
    bucket = 'trainyard',
    replicas = 1,
  ): Promise<JetStreamBlobStore> {
    const os = await retryTransient(`open the object store ${bucket}`, () =>
      new Objm(js).create(bucket, { replicas }),
    );
    return new JetStreamBlobStore(os);
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

  async get(key: string): Promise<Readable | null> {
    const result = await retryTransient(`read ${key}`, async () => {
      const info = await this.os.info(key);
      return info && !info.deleted ? this.os.get(key) : null;
    });
    if (!result) return null;
    return Readable.fromWeb(result.data as unknown as WebReadableStream<Uint8Array>);
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
