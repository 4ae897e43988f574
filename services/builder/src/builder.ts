import { buildsFirst, DomainError, type JobCommand, type SessionCommand } from '@trainyard/domain';
import { dockerAt } from '@trainyard/runtime';
import { retry, Subjects, type Failure, type StoredEvent } from '@trainyard/events';
import {
  loadJob,
  loadSession,
  runJobCommand,
  runSessionCommand,
  type JobSnapshot,
  type SessionSnapshot,
} from '@trainyard/application';
import { archiveLimits } from '@trainyard/blobs';
import {
  Liveness,
  LogPosition,
  sleep,
  supervise,
  type ServiceContext,
} from '@trainyard/service-kit';
import { buildJob, buildSessionImage } from './build.ts';
import type { ImageBuildConfig } from './image.ts';
import { pruneImages } from './prune.ts';

export interface BuilderOptions {
  /** Names the builder's saved position: builders that run side by side need names of their own. */
  name: string;
  concurrency: number;
  /** How often the builder's position in the log is saved. */
  saveEveryMs: number;
  /** A builder silent this long is gone, and its builds are taken over. */
  livenessTtlMs: number;
  /** How often a build in progress checks it is still wanted (not cancelled, not stopped). */
  heldCheckMs: number;
}

export const DEFAULT_BUILDER_OPTIONS: BuilderOptions = {
  name: 'builder',
  concurrency: 2,
  saveEveryMs: 1_000,
  livenessTtlMs: 15_000,
  heldCheckMs: 2_000,
};

export interface RunningBuilder {
  stop(): Promise<void>;
}

const RETRY_MS = 2_000;
const MAX_TRIES = 5;
/** How often a build that failed for want of the platform (the engine, the registry) is tried. */
const BUILD_TRIES = 3;
/** How often the builder's engine is rid of old images. */
const PRUNE_EVERY_MS = 60 * 60_000;

/** A build that failed in a way another try could mend. */
class RetryableBuild extends Error {
  constructor(readonly failure: Failure) {
    super(failure.message);
  }
}

/** One kind of build the builder does: where it reads, what it takes up, how it builds. */
interface BuildKind<T> {
  position: LogPosition;
  filter: string;
  /** Whether an event asks for a build. */
  wanted(event: StoredEvent): boolean;
  /** Claims the build of `id`: see `claim` in `startBuilder`. */
  claim(id: string): Promise<T | 'held' | null>;
  /** Whether this builder still holds the build of `id`: false once it is cancelled or stopped. */
  holds(id: string): Promise<boolean>;
  build(claimed: T, signal: AbortSignal): Promise<void>;
}

/** Where the builder builds images, when its config names an engine and a registry. */
export function imageBuildConfig(config: ServiceContext['config']): ImageBuildConfig | null {
  const host = config.TRAINYARD_DOCKER_HOST;
  const registry = config.TRAINYARD_REGISTRY;
  if (!host || !registry) return null;
  const username = config.TRAINYARD_REGISTRY_USERNAME;
  const password = config.TRAINYARD_REGISTRY_PASSWORD;
  return {
    docker: dockerAt(host),
    registry,
    ...(username && password && { auth: { username, password } }),
    ...(config.TRAINYARD_PIP_INDEX_URL && { pipIndexUrl: config.TRAINYARD_PIP_INDEX_URL }),
    ...(config.TRAINYARD_PIP_FIND_LINKS && { pipFindLinks: config.TRAINYARD_PIP_FIND_LINKS }),
    network: config.TRAINYARD_BUILD_NETWORK,
    memoryBytes: Math.floor(config.TRAINYARD_BUILD_MEMORY_GB * 1024 ** 3),
    timeoutMs: config.TRAINYARD_BUILD_TIMEOUT_MIN * 60_000,
  };
}

/**
 * Builds submitted jobs that need it, and the images of sessions that name a base image. It
 * reads job and session events from saved positions; each build is claimed with
 * `JobBuildStarted` (`SessionBuildStarted`) at the aggregate's head, so two builders never build
 * the same one, and a position only moves past a request once its outcome is in the log.
 */
export async function startBuilder(
  ctx: ServiceContext,
  opts: BuilderOptions = DEFAULT_BUILDER_OPTIONS,
): Promise<RunningBuilder> {
  const log = ctx.log.child({ component: 'builder' });
  const replicas = ctx.config.TRAINYARD_STREAM_REPLICAS;
  const jobPosition = await LogPosition.open(ctx.bus.js, opts.name, replicas);
  const sessionPosition = await LogPosition.open(ctx.bus.js, `${opts.name}-sessions`, replicas);
  const positions = [jobPosition, sessionPosition];
  const liveness = await Liveness.open(ctx.bus.js, opts.livenessTtlMs, replicas);
  await liveness.announce(ctx.instanceId);
  const stopping = new AbortController();
  const inflight = new Set<Promise<void>>();
  const meta = () => ({ actor: { kind: 'service' as const, id: ctx.instanceId }, now: new Date() });
  const images = imageBuildConfig(ctx.config);

  /**
   * Claims a build found `ready` (nobody holds it yet) or held by `builderId`: starts it, takes
   * it over from a builder that is gone, `held` while a live one has it, null when there is
   * nothing to build (or it is this builder's already). A claim another builder won meanwhile
   * is `held`: the next look finds who holds it, and takes it over should that one go.
   */
  async function claim<T>(
    id: string,
    found: { ready: boolean; builderId: string | null },
    start: () => Promise<T>,
    reclaim: (goneBuilderId: string) => Promise<T>,
  ): Promise<T | 'held' | null> {
    const lost = (err: unknown): 'held' => {
      if (err instanceof DomainError) return 'held';
      throw err;
    };
    if (found.ready) return start().catch(lost);
    const { builderId } = found;
    if (!builderId || builderId === ctx.instanceId) return null;
    if (await liveness.isAlive(builderId)) return 'held';
    log.warn({ id, goneBuilderId: builderId }, 'taking over the build of a builder that is gone');
    return reclaim(builderId).catch(lost);
  }

  /** A build tried again, boundedly, while it fails for want of the platform. */
  async function withTries<T extends { ok: boolean }>(
    id: string,
    signal: AbortSignal,
    once: () => Promise<T & ({ ok: true } | { ok: false; failure: Failure })>,
  ): Promise<T & ({ ok: true } | { ok: false; failure: Failure })> {
    const tried = async () => {
      const built = await once();
      if (!built.ok && built.failure.retryable) throw new RetryableBuild(built.failure);
      return built;
    };
    return retry(tried, {
      attempts: BUILD_TRIES,
      baseMs: RETRY_MS,
      maxMs: RETRY_MS * 4,
      signal,
      retryable: (err) => err instanceof RetryableBuild,
      onRetry: (err, tries) =>
        log.warn({ id, tries, reason: (err as Error).message }, 'build failed; trying again'),
    }).catch((err: unknown) => {
      if (err instanceof RetryableBuild && !signal.aborted)
        return { ok: false, failure: err.failure } as T & { ok: false; failure: Failure };
      throw err;
    });
  }

  const jobs: BuildKind<JobSnapshot> = {
    position: jobPosition,
    filter: Subjects.aggregateEvents('job'),
    wanted: (event) => event.type === 'JobSubmitted' && buildsFirst(event.data),
    async claim(jobId) {
      const current = await loadJob(ctx.bus.store, jobId);
      const { status, builderId } = current.state;
      const run = (command: JobCommand) =>
        runJobCommand(ctx.bus.store, jobId, command, meta(), { snapshot: current });
      return claim(
        jobId,
        { ready: status === 'submitted', builderId: status === 'building' ? builderId : null },
        () => run({ type: 'StartBuild', builderId: ctx.instanceId }),
        (gone) => run({ type: 'ReclaimBuild', builderId: ctx.instanceId, goneBuilderId: gone }),
      );
    },
    async holds(jobId) {
      const { status, builderId } = (await loadJob(ctx.bus.store, jobId)).state;
      return status === 'building' && builderId === ctx.instanceId;
    },
    async build(claimed, signal) {
      const jobId = claimed.state.id;
      const started = Date.now();
      const { spec, code } = claimed.state;
      if (!spec) return;
      log.info({ jobId }, 'building');
      const limits = archiveLimits(ctx.config);
      const outcome = await withTries(jobId, signal, () =>
        buildJob(ctx.bus, ctx.blobs, jobId, spec, code, limits, images, signal),
      );
      await runJobCommand(
        ctx.bus.store,
        jobId,
        outcome.ok
          ? {
              type: 'CompleteBuild',
              artifact: outcome.artifact,
              ...(outcome.image && { image: outcome.image }),
              durationMs: Date.now() - started,
            }
          : { type: 'FailBuild', failure: outcome.failure },
        meta(),
        { snapshot: claimed },
      );
      log.info({ jobId, ok: outcome.ok, ms: Date.now() - started }, 'build finished');
    },
  };

  const sessions: BuildKind<SessionSnapshot> = {
    position: sessionPosition,
    filter: Subjects.aggregateEvents('session'),
    wanted: (event) => event.type === 'SessionRequested' && event.data.build === true,
    async claim(sessionId) {
      const current = await loadSession(ctx.bus.store, sessionId);
      const { status, builderId } = current.state;
      const run = (command: SessionCommand) =>
        runSessionCommand(ctx.bus.store, sessionId, command, meta(), { snapshot: current });
      if (status !== 'building') return null;
      return claim(
        sessionId,
        { ready: builderId === null, builderId },
        () => run({ type: 'StartBuild', builderId: ctx.instanceId }),
        (gone) => run({ type: 'ReclaimBuild', builderId: ctx.instanceId, goneBuilderId: gone }),
      );
    },
    async holds(sessionId) {
      const { status, builderId } = (await loadSession(ctx.bus.store, sessionId)).state;
      return status === 'building' && builderId === ctx.instanceId;
    },
    async build(claimed, signal) {
      const sessionId = claimed.state.id;
      const started = Date.now();
      const { spec, code } = claimed.state;
      if (!spec?.image) return;
      const base = spec.image;
      log.info({ sessionId }, 'building');
      const limits = archiveLimits(ctx.config);
      const outcome = await withTries(sessionId, signal, () =>
        buildSessionImage(ctx.bus, ctx.blobs, sessionId, base, code, limits, images, signal),
      );
      const builderId = ctx.instanceId;
      await runSessionCommand(
        ctx.bus.store,
        sessionId,
        outcome.ok
          ? {
              type: 'CompleteBuild',
              builderId,
              image: outcome.image,
              durationMs: Date.now() - started,
            }
          : { type: 'FailBuild', builderId, failure: outcome.failure },
        meta(),
        { snapshot: claimed },
      );
      log.info({ sessionId, ok: outcome.ok, ms: Date.now() - started }, 'build finished');
    },
  };

  /**
   * Builds what was claimed, checking every `heldCheckMs` that the build is still this
   * builder's: one whose job is cancelled or whose session is stopped meanwhile is abandoned
   * at once (the engine's build with it), not run to its end.
   */
  async function buildWhileHeld<T>(kind: BuildKind<T>, id: string, claimed: T): Promise<void> {
    const unwanted = new AbortController();
    let checking = false;
    const check = () => {
      if (checking) return;
      checking = true;
      kind
        .holds(id)
        .then(
          (held) => {
            if (!held) unwanted.abort(new Error(`the build of ${id} is no longer wanted`));
          },
          (err: unknown) => log.warn({ err, id }, 'could not check the build is still wanted'),
        )
        .finally(() => (checking = false));
    };
    const checker = setInterval(check, opts.heldCheckMs);
    try {
      await kind.build(claimed, AbortSignal.any([stopping.signal, unwanted.signal]));
    } catch (err) {
      if (!unwanted.signal.aborted || stopping.signal.aborted) throw err;
      log.info({ id }, 'build abandoned: it was cancelled or stopped');
    } finally {
      clearInterval(checker);
    }
  }

  /**
   * Builds with bounded retries for infrastructure errors; the domain's refusals end it. While a
   * live builder holds the build it waits, and takes it over if that builder goes.
   */
  async function buildWithRetries<T>(kind: BuildKind<T>, id: string): Promise<void> {
    const claimAndBuild = async () => {
      while (!stopping.signal.aborted) {
        const claimed = await kind.claim(id);
        if (claimed === null) return;
        if (claimed !== 'held') return buildWhileHeld(kind, id, claimed);
        await sleep(opts.livenessTtlMs / 3, stopping.signal);
      }
    };
    try {
      await retry(claimAndBuild, {
        attempts: MAX_TRIES,
        baseMs: RETRY_MS,
        maxMs: RETRY_MS * 4,
        signal: stopping.signal,
        retryable: (err) => !(err instanceof DomainError),
        onRetry: (err, tries) => log.warn({ err, id, tries }, 'build handling failed; retrying'),
      });
    } catch (err) {
      if (err instanceof DomainError || stopping.signal.aborted) return;
      log.error({ err, id }, 'giving up on the build');
    }
  }

  /** Follows the log for one kind of build, each build in turn within the concurrency. */
  async function follow<T>(kind: BuildKind<T>): Promise<void> {
    await ctx.events.follow(
      {
        fromSeq: kind.position.resumeAt,
        filter: kind.filter,
        signal: stopping.signal,
        onStall: (read) => log.warn({ read }, 'builder reader stalled; starting it again'),
      },
      async (event) => {
        const wanted = kind.wanted(event);
        kind.position.read(event.seq, wanted);
        if (!wanted) return;
        while (inflight.size >= opts.concurrency) await Promise.race(inflight);
        const p = buildWithRetries(kind, event.aggregateId).finally(() => {
          kind.position.done(event.seq);
          inflight.delete(p);
        });
        inflight.add(p);
      },
    );
  }

  const saver = setInterval(() => {
    for (const position of positions)
      position
        .save()
        .catch((err: unknown) => log.warn({ err }, 'could not save the builder position'));
  }, opts.saveEveryMs);
  const announcer = setInterval(() => {
    liveness
      .announce(ctx.instanceId)
      .catch((err: unknown) => log.warn({ err }, 'could not announce the builder'));
  }, opts.livenessTtlMs / 3);
  let pruning: Promise<void> = Promise.resolve();
  const prune = () => {
    if (!images) return;
    pruning = pruning
      .then(async () => {
        const { removed } = await pruneImages(images.docker, {
          maxAgeMs: ctx.config.TRAINYARD_IMAGE_MAX_AGE_HOURS * 3_600_000,
          maxTotalBytes: ctx.config.TRAINYARD_IMAGE_CACHE_GB * 1024 ** 3,
        });
        if (removed.length) log.info({ removed: removed.length }, 'removed old images');
      })
      .catch((err: unknown) => log.warn({ err }, 'could not remove old images'));
  };
  const pruner = setInterval(prune, PRUNE_EVERY_MS);
  prune();
  const done = Promise.all([
    supervise('builder', () => follow(jobs), stopping.signal, log),
    supervise('session builder', () => follow(sessions), stopping.signal, log),
  ]);
  log.info({ from: jobPosition.resumeAt }, 'builder started');
  return {
    stop: async () => {
      stopping.abort();
      await done;
      await Promise.all(inflight);
      clearInterval(saver);
      clearInterval(announcer);
      clearInterval(pruner);
      await pruning;
      await liveness.withdraw(ctx.instanceId);
      for (const position of positions) await position.save().catch(() => undefined);
    },
  };
}
