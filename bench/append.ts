import { randomUUID } from 'node:crypto';
import { StorageType } from '@nats-io/jetstream';
import type { Bus } from '@trainyard/service-kit';

/**
 * The raw JetStream ceiling on this machine: pipelined publishes of ~200-byte events, each
 * with a msg id and an expected-last-subject-sequence guard, to a file-backed stream.
 */
export async function appendCeiling(
  bus: Bus,
  total = 20_000,
  inFlight = 256,
): Promise<{ events: number; perSecond: number }> {
  await bus.jsm.streams.add({
    name: 'BENCH_APPEND',
    subjects: ['bench.append.>'],
    storage: StorageType.File,
  });
  const payload = JSON.stringify({ type: 'JobSubmitted', data: { pad: 'x'.repeat(150) } });
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < total) {
        const i = next++;
        await bus.js.publish(`bench.append.${i}`, payload, {
          msgID: randomUUID(),
          expect: { lastSubjectSequence: 0 },
        });
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await bus.jsm.streams.delete('BENCH_APPEND');
  return { events: total, perSecond: Math.round(total / seconds) };
}
