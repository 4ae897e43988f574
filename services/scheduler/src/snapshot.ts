import {
  restoreCluster,
  snapshotCluster,
  type ClusterSnapshot,
  type ClusterState,
} from '@trainyard/domain';
import type { ServiceContext } from '@trainyard/platform';

const KEY = 'scheduler/cluster-snapshot.json';

/**
 * The scheduler's cluster state as of a stream sequence, kept in the blob store so that a new
 * leader folds only the events after it. A missing or unreadable snapshot means a full replay.
 */
export async function loadSnapshot(ctx: ServiceContext): Promise<ClusterState | null> {
  try {
    const blob = await ctx.blobs.get(KEY);
    if (!blob) return null;
    const chunks: Buffer[] = [];
    for await (const chunk of blob) chunks.push(chunk as Buffer);
    const snapshot = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ClusterSnapshot;
    if (snapshot.version !== 1) return null;
    return restoreCluster(snapshot);
  } catch (err) {
    ctx.log.warn({ err }, 'scheduler snapshot unreadable; replaying the whole log');
    return null;
  }
}

/** Writes a snapshot of `cluster` as it is now (serialised at once, stored in the background). */
export async function saveSnapshot(ctx: ServiceContext, cluster: ClusterState): Promise<void> {
  const bytes = Buffer.from(JSON.stringify(snapshotCluster(cluster)));
  await ctx.blobs.put(KEY, bytes, bytes.length);
}
