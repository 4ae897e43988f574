import type { JetStreamClient } from '@nats-io/jetstream';
import { retry } from '@trainyard/events';
import { ensureWorkerBucket } from '@trainyard/blobs';
import { supervise } from '@trainyard/service-kit';
import type { Logger } from '@trainyard/service-kit';
import type { WorkerKey, WorkerKeys, WorkerRecord } from '@trainyard/application';
import type { NatsServer } from './nats-server.ts';
import { workerPermissions } from './permissions.ts';

/**
 * Keeps a nats-server's users in step with the enrolled workers: each gets a user of its own,
 * by its key, allowed only its own subjects, and an object store bucket of its own, made (with
 * `js`, a login that may make streams) before its key lets it in. A revoked worker's connection
 * is closed when the server reloads; its bucket stays, with the outputs of its attempts.
 */
export function authorizeWorkers(
  keys: WorkerKeys,
  server: NatsServer,
  log: Logger,
  buckets: { js: JetStreamClient; replicas: number },
): { stop(): Promise<void> } {
  const made = new Set<string>();
  const stopping = new AbortController();
  let applying: Promise<void> = Promise.resolve();
  /** The latest list wins; a failed update is tried again until it holds. */
  let wanted: WorkerKey[] | null = null;
  const updateOnce = async () => {
    const workers = wanted;
    if (!workers) return;
    // A worker whose bucket cannot be made yet waits for its login; the others (a revocation
    // among them) take effect now, and the update is tried again.
    const unmade: string[] = [];
    for (const w of workers.filter((w) => !made.has(w.name))) {
      try {
        await ensureWorkerBucket(buckets.js, w.name, buckets.replicas);
        made.add(w.name);
      } catch (err) {
        log.error({ err, worker: w.name }, 'could not make the bucket of a worker');
        unmade.push(w.name);
      }
    }
    await server.setWorkers(
      workers
        .filter((w) => made.has(w.name))
        .map((w) => ({ nkey: w.publicKey, permissions: workerPermissions(w.name) })),
    );
    if (unmade.length > 0) throw new Error(`no bucket yet for ${unmade.join(', ')}`);
    if (wanted === workers) wanted = null;
    log.info({ workers: workers.length }, 'worker logins updated');
  };
  const update = () =>
    retry(updateOnce, {
      attempts: Infinity,
      baseMs: 100,
      maxMs: 5_000,
      signal: stopping.signal,
      onRetry: (err, attempt) =>
        log.error({ err, attempt }, 'could not update the worker logins; trying again'),
    }).catch(() => undefined);
  const apply = (records: WorkerRecord[]) => {
    wanted = records.filter((r): r is WorkerKey => r.status === 'enrolled');
    applying = applying.then(update);
  };
  const loop = supervise(
    'worker logins',
    () => keys.watch(stopping.signal, apply),
    stopping.signal,
    log,
  );
  return {
    stop: async () => {
      stopping.abort();
      await loop;
      await applying;
    },
  };
}
