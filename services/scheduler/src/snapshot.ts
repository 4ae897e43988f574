import {
  CLUSTER_SNAPSHOT_VERSION,
  restoreCluster,
  snapshotCluster,
  type ClusterSnapshot,
  type ClusterState,
} from '@trainyard/domain';
import { withDeadline, type ServiceContext } from '@trainyard/service-kit';

const KEY = 'scheduler/cluster-snapshot.json';
/** A snapshot read or written in no more than this; past it, a new leader replays instead. */
const DEADLINE_MS = 20_000;

async function readSnapshot(ctx: ServiceContext): Promise<ClusterSnapshot | null> {
  const blob = await ctx.blobs.get(KEY);
  if (!blob) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of blob) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as ClusterSnapshot;
}

/**
 * The scheduler's cluster state as of a stream sequence, kept in the blob store so that a new
 * leader folds only the events after it. A missing, unreadable or slow snapshot means a full
 * replay: the snapshot saves time, the log alone is the truth.
 */
export async function loadSnapshot(ctx: ServiceContext): Promise<ClusterState | null> {
  try {
    const snapshot = await withDeadline('reading the snapshot', DEADLINE_MS, readSnapshot(ctx));
    if (!snapshot || snapshot.version !== CLUSTER_SNAPSHOT_VERSION) return null;
    return restoreCluster(snapshot);
  } catch (err) {
    ctx.log.warn({ err }, 'scheduler snapshot unreadable; replaying the whole log');
    return null;
  }
}

/**
 * Writes a snapshot of `cluster` as it is now (serialised at once, stored in the background),
 * giving up after `deadlineMs`.
 */
export async function saveSnapshot(
  ctx: ServiceContext,
  cluster: ClusterState,
  deadlineMs = DEADLINE_MS,
): Promise<void> {
  const bytes = Buffer.from(JSON.stringify(snapshotCluster(cluster)));
  await withDeadline('writing the snapshot', deadlineMs, ctx.blobs.put(KEY, bytes, bytes.length));
}
