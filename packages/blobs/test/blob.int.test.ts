import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats, tempDir } from '@trainyard/testkit';
import {
  ensureWorkerBucket,
  getWritten,
  JetStreamBlobStore,
  S3BlobStore,
  type BlobStore,
} from '../src/index.ts';
import { freePort } from '@trainyard/servers';
import { connectBus, type Bus } from '@trainyard/service-kit';

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

function contract(name: string, open: () => BlobStore) {
  describe(`${name} blob store`, () => {
    it('stores bytes and a stream, reporting size and sha256', async () => {
      const store = open();
      const small = Buffer.from('hello trainyard');
      const ref = await store.put('jobs/a/small.txt', small);
      expect(ref).toEqual({
        key: 'jobs/a/small.txt',
        sizeBytes: small.length,
        sha256: createHash('sha256').update(small).digest('hex'),
      });
      expect((await readAll((await store.get('jobs/a/small.txt'))!)).toString()).toBe(
        'hello trainyard',
      );

      const big = randomBytes(3 * 1024 * 1024 + 17);
      const bigRef = await store.put(
        'jobs/a/big.bin',
        Readable.from([big.subarray(0, 1000), big.subarray(1000)]),
        big.length,
      );
      expect(bigRef.sizeBytes).toBe(big.length);
      expect(bigRef.sha256).toBe(createHash('sha256').update(big).digest('hex'));
      expect((await readAll((await store.get('jobs/a/big.bin'))!)).equals(big)).toBe(true);
      expect(await store.stat('jobs/a/big.bin')).toEqual({ sizeBytes: big.length });
    });

    it('answers null for a missing key, and deletes', async () => {
      const store = open();
      expect(await store.get('nope')).toBeNull();
      expect(await store.stat('nope')).toBeNull();
      await store.put('jobs/b/x', Buffer.from('x'));
      await store.delete('jobs/b/x');
      expect(await store.get('jobs/b/x')).toBeNull();
    });

    it('reads a blob a part at a time, by cursor, and no other blob through a cursor', async () => {
      const store = open();
      const big = randomBytes(1024 * 1024 + 5);
      await store.put('jobs/d/code', big, big.length);
      await store.put('jobs/d/other', Buffer.from('another blob'));
      const parts: Uint8Array[] = [];
      const cursors: (string | null)[] = [null];
      for (let cursor: string | null = null; ;) {
        const part = await store.readPart('jobs/d/code', cursor);
        expect(part).not.toBeNull();
        parts.push(part!.data);
        if (!part!.next) break;
        cursors.push((cursor = part!.next));
      }
      expect(parts.length).toBeGreaterThan(1);
      expect(Buffer.concat(parts).equals(big)).toBe(true);
      // A cursor of one blob reads nothing of another: it is past its end, or no cursor at all.
      for (const cursor of cursors.slice(1)) {
        const other = await store.readPart('jobs/d/other', cursor);
        expect(other === null || !Buffer.from(other.data).includes(big.subarray(0, 64))).toBe(true);
      }
      expect(await store.readPart('jobs/d/code', 'not a cursor')).toBeNull();
      expect(await store.readPart('nope', null)).toBeNull();
      await store.put('jobs/d/empty', Buffer.alloc(0));
      expect(await store.readPart('jobs/d/empty', null)).toEqual({
        data: new Uint8Array(),
        next: null,
      });
    });

    it('replaces a key that is written again', async () => {
      const store = open();
      await store.put('jobs/c/f', Buffer.from('one'));
      await store.put('jobs/c/f', Buffer.from('two!'));
      expect((await readAll((await store.get('jobs/c/f'))!)).toString()).toBe('two!');
    });
  });
}

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
let jsStore: BlobStore;
let s3: S3rver;
let s3Dir: Awaited<ReturnType<typeof tempDir>>;
let s3Store: BlobStore;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'blob-test');
  jsStore = await JetStreamBlobStore.open(bus.js, 'blobtest');
  s3Dir = await tempDir('trainyard-s3-');
  const port = await freePort();
  s3 = new S3rver({ port, address: '127.0.0.1', silent: true, directory: s3Dir.path });
  await s3.run();
  s3Store = await S3BlobStore.open({
    endpoint: `http://127.0.0.1:${port}`,
    bucket: 'trainyard-test',
    accessKey: 'S3RVER',
    secretKey: 'S3RVER',
    region: 'us-east-1',
  });
});

afterAll(async () => {
  await s3.close();
  await s3Dir.remove();
  await bus.close();
  await nats.stop();
});

contract('JetStream object', () => jsStore);
contract('S3 (s3rver)', () => s3Store);

describe('what workers write', () => {
  it('goes to a bucket of the worker’s own, and is read from there, else from the shared store', async () => {
    await expect(jsStore.ofWorker('w-none')).rejects.toThrow(/no object store bucket of its own/);
    expect(await jsStore.ofWorker('w-none', { orShared: true })).toBe(jsStore);

    await ensureWorkerBucket(bus.js, 'w-own');
    const own = await jsStore.ofWorker('w-own');
    expect(own).not.toBe(jsStore);
    await own.put('jobs/j1/outputs/a', Buffer.from('from w-own'));
    expect(await jsStore.stat('jobs/j1/outputs/a')).toBeNull();
    expect(
      (await readAll((await getWritten(jsStore, 'w-own', 'jobs/j1/outputs/a'))!)).toString(),
    ).toBe('from w-own');
    // Written before workers had buckets: found in the shared store.
    await jsStore.put('jobs/j0/outputs/a', Buffer.from('kept from before'));
    expect(
      (await readAll((await getWritten(jsStore, 'w-own', 'jobs/j0/outputs/a'))!)).toString(),
    ).toBe('kept from before');
    expect(await getWritten(jsStore, 'w-own', 'jobs/j9/outputs/a')).toBeNull();
    expect(await s3Store.ofWorker('w-own')).toBe(s3Store);
  });
});
