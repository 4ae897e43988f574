import type { Msg } from '@nats-io/nats-core';
import { currentAttempt, isTerminal, memberOnWorker, runHolder } from '@trainyard/domain';
import { AttemptStatus, Subjects } from '@trainyard/events';
import { loadJob, loadSession } from '@trainyard/application';
import {
  answerFetch,
  fetchableJob,
  fetchableOutput,
  fetchableSession,
  FetchRequestSchema,
  type FetchRequest,
} from '@trainyard/blobs';
import type { ServiceContext } from '@trainyard/service-kit';
import { serveWorkerRequests, type WorkerRequestLimits } from './requests.ts';

/**
 * Parts given at once: 64 in all, 8 of one worker's, whose next 64 wait their turn (past them
 * it is answered `BUSY` and asks again); one that waited past its asker's 15 s is dropped.
 */
const LIMITS: WorkerRequestLimits = {
  concurrency: 64,
  perWorker: 8,
  waiting: 64,
  staleMs: 10_000,
};
/** How long a worker's hold on a job is taken as read for the later parts of a read. */
const HOLD_MS = 30_000;
const HOLDS_KEPT = 10_000;

interface Hold {
  until: number;
  /** The attempt whose outputs the job shows, and the worker that keeps them. */
  outputs: { attemptId: string | null; workerId: string | null };
  /** The code and artifact the job runs (a shard's, its array job's): what may be read of it. */
  runs: string[];
}

/** The job a worker must hold for what it asks: the key's, or for code, the job it names. */
export function heldFor(request: FetchRequest): string | null {
  const code = fetchableJob(request.key);
  if (code) return request.job ?? code;
  return fetchableOutput(request.key)?.jobId ?? null;
}

/**
 * Whether a hold on a job lets its worker read `key`: the code or artifact the job runs (a
 * shard's are its array job's), or the outputs of the attempt whose outputs the job shows, which
 * held it before.
 */
export function mayRead(hold: Pick<Hold, 'runs' | 'outputs'>, key: string): boolean {
  if (fetchableJob(key)) return hold.runs.includes(key);
  const output = fetchableOutput(key);
  return output !== null && hold.outputs.attemptId === output.attemptId;
}

export interface RunningFetches {
  stop(): Promise<void>;
}

/** Whether `workerId` holds the run of session `sessionId` now, from the log. */
async function holdsSession(
  ctx: ServiceContext,
  workerId: string,
  sessionId: string,
): Promise<boolean> {
  const { state } = await loadSession(ctx.bus.store, sessionId);
  const run = runHolder(state);
  return run?.workerId === workerId && (state.status === 'starting' || state.status === 'running');
}

/**
 * Gives workers the code and artifacts of the attempts they hold, and the code of the session
 * runs they hold, a part at a time (`fetchedBlobs` asks): a worker's login reads no blob itself.
 * The worker is named by the subject it asked on, which only it may publish to; its hold on the
 * job is read from the log at the start of each read, and taken as read for the later parts of
 * it for a short while, so that one read costs one lookup. A session's code, read once per run,
 * is checked at every part.
 */
export function startFetches(ctx: ServiceContext): RunningFetches {
  const log = ctx.log.child({ component: 'fetches' });
  /** `worker job` → until when its hold is taken as read, and whose outputs the job shows. */
  const holds = new Map<string, Hold>();

  /** A worker's hold on a job's live attempt, or null when it has none. */
  async function holdOf(workerId: string, jobId: string, fresh: boolean): Promise<Hold | null> {
    const key = `${workerId} ${jobId}`;
    const kept = holds.get(key);
    if (!fresh && kept && kept.until > Date.now()) return kept;
    const { state } = await loadJob(ctx.bus.store, jobId);
    const attempt = currentAttempt(state);
    const held =
      !isTerminal(state.status) &&
      attempt !== undefined &&
      memberOnWorker(attempt, workerId) !== undefined &&
      (attempt.status === AttemptStatus.assigned || attempt.status === AttemptStatus.running);
    if (!held) return null;
    const hold = {
      until: Date.now() + HOLD_MS,
      outputs: { attemptId: state.outputsAttemptId, workerId: state.outputsWorkerId },
      runs: [state.code?.key, state.artifact?.key].filter((key) => key !== undefined),
    };
    holds.delete(key);
    holds.set(key, hold);
    if (holds.size > HOLDS_KEPT) holds.delete(holds.keys().next().value!);
    return hold;
  }

  async function handle(msg: Msg, workerId: string): Promise<void> {
    let request;
    try {
      request = FetchRequestSchema.parse(msg.json());
    } catch {
      answerFetch(msg, 'BAD_REQUEST');
      return;
    }
    const sessionId = fetchableSession(request.key);
    if (sessionId) {
      const held = await holdsSession(ctx, workerId, sessionId);
      if (!held) log.warn({ workerId, sessionId }, "refused a fetch of a session's code not its");
      answerFetch(
        msg,
        held ? ((await ctx.blobs.readPart(request.key, request.cursor)) ?? 'missing') : 'NOT_YOURS',
      );
      return;
    }
    const jobId = heldFor(request);
    const hold = jobId ? await holdOf(workerId, jobId, request.cursor === null) : null;
    if (!hold || !mayRead(hold, request.key)) {
      if (jobId) holds.delete(`${workerId} ${jobId}`);
      log.warn({ workerId, key: request.key.slice(0, 128) }, 'refused a fetch of a blob not its');
      answerFetch(msg, 'NOT_YOURS');
      return;
    }
    const output = fetchableOutput(request.key);
    const store = output
      ? await ctx.blobs.ofWorker(hold.outputs.workerId ?? '', { orShared: true })
      : ctx.blobs;
    const part = await store.readPart(request.key, request.cursor);
    answerFetch(msg, part ?? 'missing');
  }

  return serveWorkerRequests(ctx, {
    subject: Subjects.allFetches,
    queue: 'watchdog',
    limits: LIMITS,
    log,
    handle: (msg, workerId) =>
      handle(msg, workerId).catch((err: unknown) => {
        log.error({ err, workerId }, 'could not give a part of a blob');
        answerFetch(msg, 'UNAVAILABLE');
      }),
    busy: (msg) => answerFetch(msg, 'BUSY'),
  });
}
