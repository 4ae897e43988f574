import { buildsFirst, DomainError } from '@trainyard/domain';
import { dockerAt } from '@trainyard/runtime';
import { retry, Subjects } from '@trainyard/events';
import { loadJob, type JobSnapshot, runJobCommand } from '@trainyard/application';
import { archiveLimits } from '@trainyard/blobs';
import {
  Liveness,
  LogPosition,
  sleep,
  supervise,
  type ServiceContext,
} from '@trainyard/service-kit';
import { buildJob, type BuildOutcome } from './build.ts';
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
}

export const DEFAULT_BUILDER_OPTIONS: BuilderOptions = {
  name: 'builder',
  concurrency: 2,
  saveEveryMs: 1_000,
  livenessTtlMs: 15_000,
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
  constructor(readonly outcome: BuildOutcome & { ok: false }) {
    super(outcome.failure.message);
  }
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
 * Builds submitted jobs that need it. It reads job events from its saved position; each build
 * is claimed with `JobBuildStarted` at the job's head, so two builders never build the same
 * job, and the position only moves past a submission once its outcome is in the log.
 */
export async function startBuilder(
  ctx: ServiceContext,
  opts: BuilderOptions = DEFAULT_BUILDER_OPTIONS,
): Promise<RunningBuilder> {
  const log = ctx.log.child({ component: 'builder' });
  const replicas = ctx.config.TRAINYARD_STREAM_REPLICAS;
  const position = await LogPosition.open(ctx.bus.js, opts.name, replicas);
  const liveness = await Liveness.open(ctx.bus.js, opts.livenessTtlMs, replicas);
  await liveness.announce(ctx.instanceId);
  const stopping = new AbortController();
  const inflight = new Set<Promise<void>>();
  const meta = () => ({ actor: { kind: 'service' as const, id: ctx.instanceId }, now: new Date() });
  const images = imageBuildConfig(ctx.config);

  /**
   * Claims a job's build: a new one, or one whose builder is gone. `held` when a live builder
   * has it; null when there is nothing to build.
   */
  async function claim(jobId: string): Promise<JobSnapshot | 'held' | null> {
    const current = await loadJob(ctx.bus.store, jobId);
    const { status, builderId } = current.state;
    if (status === 'submitted') {
      const command = { type: 'StartBuild' as const, builderId: ctx.instanceId };
      return runJobCommand(ctx.bus.store, jobId, command, meta(), { snapshot: current });
    }
    if (status !== 'building' || !builderId || builderId === ctx.instanceId) return null;
    if (await liveness.isAlive(builderId)) return 'held';
    log.warn(
      { jobId, goneBuilderId: builderId },
      'taking over the build of a builder that is gone',
    );
    const command = {
      type: 'ReclaimBuild' as const,
      builderId: ctx.instanceId,
      goneBuilderId: builderId,
    };
    return runJobCommand(ctx.bus.store, jobId, command, meta(), { snapshot: current });
  }

  async function build(claimed: JobSnapshot): Promise<void> {
    const jobId = claimed.state.id;
    const started = Date.now();
    const { spec, code } = claimed.state;
    if (!spec) return;
    log.info({ jobId }, 'building');
    const once = async () => {
      const built = await buildJob(
        ctx.bus,
        ctx.blobs,
        jobId,
        spec,
        code,
        archiveLimits(ctx.config),
        images,
        stopping.signal,
      );
      if (!built.ok && built.failure.retryable) throw new RetryableBuild(built);
      return built;
    };
    const outcome = await retry(once, {
      attempts: BUILD_TRIES,
      baseMs: RETRY_MS,
      maxMs: RETRY_MS * 4,
      signal: stopping.signal,
      retryable: (err) => err instanceof RetryableBuild,
      onRetry: (err, tries) =>
        log.warn({ jobId, tries, reason: (err as Error).message }, 'build failed; trying again'),
    }).catch((err: unknown) => {
      if (err instanceof RetryableBuild && !stopping.signal.aborted) return err.outcome;
      throw err;
    });
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
  }

  /**
   * Builds with bounded retries for infrastructure errors; the domain's refusals end it. While a
   * live builder holds the build it waits, and takes it over if that builder goes.
   */
  async function buildWithRetries(jobId: string): Promise<void> {
    const claimAndBuild = async () => {
      while (!stopping.signal.aborted) {
        const claimed = await claim(jobId);
        if (claimed === null) return;
        if (claimed !== 'held') return build(claimed);
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
        onRetry: (err, tries) => log.warn({ err, jobId, tries }, 'build handling failed; retrying'),
      });
    } catch (err) {
      if (err instanceof DomainError || stopping.signal.aborted) return;
      log.error({ err, jobId }, 'giving up on the build');
    }
  }

  async function follow(): Promise<void> {
    await ctx.events.follow(
      {
        fromSeq: position.resumeAt,
        filter: Subjects.aggregateEvents('job'),
        signal: stopping.signal,
        onStall: (read) => log.warn({ read }, 'builder reader stalled; starting it again'),
      },
      async (event) => {
        const wanted = event.type === 'JobSubmitted' && buildsFirst(event.data);
        position.read(event.seq, wanted);
        if (!wanted) return;
        while (inflight.size >= opts.concurrency) await Promise.race(inflight);
        const p = buildWithRetries(event.aggregateId).finally(() => {
          position.done(event.seq);
          inflight.delete(p);
        });
        inflight.add(p);
      },
    );
  }

  const saver = setInterval(() => {
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
  const done = supervise('builder', follow, stopping.signal, log);
  log.info({ from: position.resumeAt }, 'builder started');
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
      await position.save().catch(() => undefined);
    },
  };
}
