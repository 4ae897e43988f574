import { truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliverPolicy } from '@nats-io/jetstream';
import { Streams, Subjects } from '@trainyard/events';
import { startTestNats, tempDir } from '@trainyard/testkit';
import { BlobKeys, JetStreamBlobStore } from '@trainyard/blobs';
import { LogShipper, logLimitNote } from '../src/index.ts';
import { connectBus, type Bus } from '@trainyard/service-kit';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'logship-test');
  dir = await tempDir('trainyard-logship-');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
  await dir.remove();
});

async function liveLog(jobId: string): Promise<{ text: string; ids: string[] }> {
  const consumer = await bus.js.consumers.get(Streams.logs, {
    filter_subjects: Subjects.jobLogs(jobId),
    deliver_policy: DeliverPolicy.All,
  });
  const pending = (await consumer.info()).num_pending;
  const ids: string[] = [];
  let text = '';
  if (pending === 0) return { text, ids };
  for await (const msg of await consumer.consume()) {
    text += msg.string();
    ids.push(msg.headers?.get('Nats-Msg-Id') ?? '');
    if (msg.info.pending === 0) break;
  }
  return { text, ids };
}

describe('log shipper', () => {
  it('ships output in order, each chunk named by its place, so a repeat lands once', async () => {
    const output = ['first line\n', 'x'.repeat(100 * 1024), '\nlast line\n'];
    for (const name of ['a.log', 'b.log']) {
      const shipper = new LogShipper(bus.js, 'job_ship', 1, join(dir.path, name), {
        workerId: 'w1',
      });
      for (const part of output) shipper.write(Buffer.from(part));
      await shipper.end();
    }
    const { text, ids } = await liveLog('job_ship');
    expect(text).toBe(output.join(''));
    const subject = Subjects.attemptLogs('job_ship', 1, 'w1');
    expect(ids[0]).toBe(`${subject}@0`);
    expect(ids).toContain(`${subject}@${64 * 1024}`);
  });
});

describe('the archive of a log the process wrote', () => {
  it('holds no more than the log’s limit and the note that says so, however large the file', async () => {
    const blobs = await JetStreamBlobStore.open(bus.js, 'logship-archive');
    const cut = join(dir.path, 'sparse.log');
    await writeFile(cut, 'start\n');
    await truncate(cut, 1024 ** 4);
    const limit = 64 * 1024;
    const shipper = new LogShipper(bus.js, 'job_cut', 1, cut, {
      writtenBy: 'process',
      limitBytes: limit,
      workerId: 'w1',
    });
    await shipper.archive(blobs);
    const archived = await blobs.get(BlobKeys.log('job_cut', 1));
    const bytes = Buffer.concat(await archived!.toArray());
    const note = logLimitNote(limit);
    expect(bytes.length).toBe(limit + Buffer.byteLength(note));
    expect(bytes.subarray(0, 6).toString()).toBe('start\n');
    expect(bytes.subarray(limit).toString()).toBe(note);

    const whole = join(dir.path, 'small.log');
    await writeFile(whole, 'all of it\n');
    await new LogShipper(bus.js, 'job_whole', 1, whole, {
      writtenBy: 'process',
      limitBytes: limit,
      workerId: 'w1',
    }).archive(blobs);
    const kept = await blobs.get(BlobKeys.log('job_whole', 1));
    expect(Buffer.concat(await kept!.toArray()).toString()).toBe('all of it\n');
  });
});
