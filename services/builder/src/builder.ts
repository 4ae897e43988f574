import { AckPolicy, DeliverPolicy, type JsMsg } from '@nats-io/jetstream';
import { DomainError, needsBuild } from '@trainyard/domain';
import { decodeEvent, Streams, Subjects } from '@trainyard/events';
import { loadJob, runJobCommand, type ServiceContext } from '@trainyard/platform';
import { buildArtifact } from './build.ts';

export interface BuilderOptions {
  concurrency: number;
  setupTimeoutMs: number;
}

export const DEFAULT_BUILDER_OPTIONS: BuilderOptions = { concurrency: 2, setupTimeoutMs: 30 * 60_000 };

export interface RunningBuilder {
  stop(): Promise<void>;
}

const DURABLE = 'builder';

/**
 * Builds submitted jobs that need it. A durable consumer of job events; each build is claimed
 * with `JobBuildStarted` at the job's head, so two builders never build the same job, and the
 * message is acknowledged only once the outcome is in the log.
 */
export async function startBuilder(
  ctx: ServiceContext,
  opts: BuilderOptions = DEFAULT_BUILDER_OPTIONS,
): Promise<RunningBuilder> {
  const log = ctx.log.child({ component: 'builder' });
  await ctx.bus.jsm.consumers.add(Streams.events, {
    durable_name: DURABLE,
    filter_subject: Subjects.aggregateEvents('job'),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: 60_000 * 1_000_000,
    max_ack_pending: opts.concurrency,
    max_deliver: 10,
  });
  const consumer = await ctx.bus.js.consumers.get(Streams.events, DURABLE);
  const messages = await consumer.consume({ max_messages: opts.concurrency });
  const inflight = new Set<Promise<void>>();
  const meta = () => ({ actor: { kind: 'service' as const, id: ctx.instanceId }, now: new Date() });

  async function build(jobId: string): Promise<void> {
    const started = Date.now();
    const claimed = await runJobCommand(ctx.bus.store, jobId, { type: 'StartBuild', builderId: ctx.instanceId }, meta());
    const { spec, code } = claimed.state;
    if (!spec) return;
    log.info({ jobId }, 'building');
    const outcome = await buildArtifact(ctx.bus, ctx.blobs, jobId, spec, code, opts.setupTimeoutMs);
    await runJobCommand(
      ctx.bus.store,
      jobId,
      outcome.ok
        ? { type: 'CompleteBuild', artifact: outcome.artifact, durationMs: Date.now() - started }
        : { type: 'FailBuild', failure: outcome.failure },
      meta(),
      { snapshot: claimed },
    );
    log.info({ jobId, ok: outcome.ok, ms: Date.now() - started }, 'build finished');
  }

  async function handle(msg: JsMsg): Promise<void> {
    const event = decodeEvent(msg);
    if (event.type !== 'JobSubmitted' || !needsBuild(event.data.spec, event.data.code)) {
      msg.ack();
      return;
    }
    const working = setInterval(() => msg.working(), 20_000);
    try {
      const current = await loadJob(ctx.bus.store, event.aggregateId);
      if (current.state.status === 'submitted') await build(event.aggregateId);
      msg.ack();
    } catch (err) {
      if (err instanceof DomainError) {
        msg.ack();
        return;
      }
      log.error({ err, jobId: event.aggregateId }, 'build handling failed; will be redelivered');
      msg.nak(5_000);
    } finally {
      clearInterval(working);
    }
  }

  const loop = (async () => {
    for await (const msg of messages) {
      const p = handle(msg).finally(() => inflight.delete(p));
      inflight.add(p);
    }
  })();
  log.info('builder started');
  return {
    stop: async () => {
      messages.stop();
      await loop;
      await Promise.all(inflight);
    },
  };
}
