import type { Readable } from 'node:stream';
import { Client } from 'minio';
import type { BlobRef } from '@trainyard/events';
import { hashing } from './hashing.ts';
import type { BlobPart, BlobStore } from './types.ts';

/** The bytes a part read returns at most. */
const S3_PART_BYTES = 512 * 1024;

export interface S3Options {
  endpoint: string;
  bucket: string;
  accessKey: string;
  secretKey: string;
  region: string;
}

function isNotFound(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'NoSuchKey' || code === 'NotFound' || code === 'NoSuchObject';
}

/** Blobs in S3 or MinIO, for production. */
export class S3BlobStore implements BlobStore {
  readonly kind = 's3';
  private constructor(
    private readonly client: Client,
    private readonly bucket: string,
  ) {}

  static async open(opts: S3Options): Promise<S3BlobStore> {
    const url = new URL(opts.endpoint);
    const client = new Client({
      endPoint: url.hostname,
      port: Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
      useSSL: url.protocol === 'https:',
      accessKey: opts.accessKey,
      secretKey: opts.secretKey,
      region: opts.region,
      pathStyle: true,
    });
    if (!(await client.bucketExists(opts.bucket))) {
      await client.makeBucket(opts.bucket, opts.region);
    }
    return new S3BlobStore(client, opts.bucket);
  }

  async put(key: string, data: Readable | Uint8Array, sizeBytes?: number): Promise<BlobRef> {
    const hashed = hashing(data);
    const size = sizeBytes ?? (data instanceof Uint8Array ? data.length : undefined);
    await this.client.putObject(this.bucket, key, hashed, size);
    return { key, sizeBytes: hashed.sizeBytes, sha256: hashed.digest() };
  }

  /** One bucket holds every worker's writes: S3 gives each worker no bucket of its own. */
  ofWorker(): Promise<BlobStore> {
    return Promise.resolve(this);
  }

  async get(key: string): Promise<Readable | null> {
    try {
      return await this.client.getObject(this.bucket, key);
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  /** A byte range of the object: the cursor is where it starts. */
  async readPart(key: string, cursor: string | null): Promise<BlobPart | null> {
    const offset = Number(cursor ?? '0');
    if (!/^\d{1,15}$/.test(cursor ?? '0')) return null;
    const found = await this.stat(key);
    if (!found || (offset >= found.sizeBytes && found.sizeBytes > 0)) return null;
    if (found.sizeBytes === 0) return { data: new Uint8Array(), next: null };
    const length = Math.min(S3_PART_BYTES, found.sizeBytes - offset);
    const stream = await this.client.getPartialObject(this.bucket, key, offset, length);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    const data = Buffer.concat(chunks);
    const end = offset + data.length;
    return { data, next: end < found.sizeBytes ? String(end) : null };
  }

  async stat(key: string): Promise<{ sizeBytes: number } | null> {
    try {
      const stat = await this.client.statObject(this.bucket, key);
      return { sizeBytes: stat.size };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await this.client.removeObject(this.bucket, key);
  }
}
