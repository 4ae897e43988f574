import { failure, type ProcessExit } from '@trainyard/domain';
import { Subjects, type Failure, type RunAttempt } from '@trainyard/events';
import { sendReport, type AttemptReport, type ReportedJob } from '@trainyard/application';
import { archiveLimits } from '@trainyard/blobs';
import { LogShipper, shippedBytes, type RunningAttempt } from '@trainyard/runtime';
import { type Channel, ChannelRefused, type ChannelRequest } from '@trainyard/tunnel';
import { MetricsCollector } from './metrics.ts';
import { untilDone } from './until-done.ts';
import { verdictReport, watchHealth, type HealthWatcher } from './health.ts';
import { probeReportIn, watchProbe, watchTimeLimit } from './watches.ts';
import { OutputMirror } from './outputs.ts';
import {
  markSandbox,
  prepareSandbox,
  removeSandbox,
  runSpecIn,
  sandboxDir,
  type Sandbox,
} from './sandbox.ts';
import { SandboxError } from './code.ts';
import type { WorkerContext, WorkerOptions } from './options.ts';
import { Shells } from './shells.ts';
import { type JobUser, releaseUser } from './users.ts';

/**
 * One attempt on this worker, from dispatch to its last report. It appends nothing itself: it
 * reports to the control plane, which decides on the log, so a fenced attempt cannot report.
 */
export class AttemptRun {
  #queue: Promise<unknown> = Promise.resolve();
  /** The attempt's process, once it is being started. */
  #process: Promise<RunningAttempt> | null = null;
  #stoppedByWorker = false;
  /** A stop came for it: whatever it exits with, it did not end by itself. */
  #stopAsked = false;
  /** The worker stopped it itself past its job's time limit, no stop having come. */
  #timeLimited = false;
  /** The probe ran out its time and was stopped. */
  #probeTimedOut = false;
  /** Why the worker stopped it, a service, for failing its health check. */
  #health: HealthWatcher | undefined;
  #startedAt = 0;
  #box: Sandbox | null = null;
  /** The account the attempt runs as, when the worker gives each attempt one. */
  #user: JobUser | undefined;
  /** Shells beside the attempt (`trainyard ssh JOB_ID`), once one is asked for. */
  #shells: Shells | null = null;
  /** Whether a stop has begun: no shell opens beside the attempt from then on. */
  #stopping = false;
  /** The attempt's process has ended: no shell opens beside it any more. */
  #exited = false;
  /** Settles once the attempt needs no more of the worker. */
  readonly done: Promise<void>;
  #resolveDone!: () => void;

  constructor(
    private readonly ctx: WorkerContext,
    private readonly opts: WorkerOptions,
    readonly msg: RunAttempt,
    /** Aborts when the worker stops: work that waits for NATS gives up then. */
    private readonly stopping: AbortSignal,
  ) {
    this.done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  get attemptId(): string {
    return this.msg.attemptId;
  }

  /**
   * Reports to the control plane, in order with this attempt's other reports. The answer says
   * where the job stands (null when the control plane refused the report).
   */
  #report(report: AttemptReport): Promise<ReportedJob | null> {
    const next = this.#queue.then(async () => {
      const reply = await sendReport(this.ctx.bus.nc, this.opts.name, {
        kind: 'attempt',
        jobId: this.msg.jobId,
        report,
      });
      if (reply.ok) return reply.job ?? null;
      this.ctx.log.info(
        { jobId: this.msg.jobId, attemptId: this.attemptId, code: reply.code },
        reply.message,
      );
      return null;
    });
    this.#queue = next.catch(() => undefined);
    return next;
  }

  /**
   * Prepares the sandbox and confirms the start with `JobStarted`. Resolves once the dispatch
   * may be acknowledged: the attempt runs, or it was refused and has nothing left to do.
   */
  async start(): Promise<void> {
    let box: Sandbox;
    try {
      const dir = sandboxDir(this.opts.sandboxRoot, this.msg);
      this.#user = await this.opts.users?.claim(this.attemptId, dir);
      box = await prepareSandbox(
        this.opts.sandboxRoot,
        this.msg,
        this.ctx.reads(this.msg.jobId),
        archiveLimits(this.ctx.config),
        this.#user,
      );
      this.#box = box;
    } catch (err) {
      const why =
        err instanceof SandboxError ? err.failure : failure('launchError', (err as Error).message);
      await this.#fail(why);
      await this.#release();
      this.#resolveDone();
      return;
    }
    const job = await this.#report({ type: 'StartAttempt', attemptId: this.attemptId });
    const running = job?.attemptId === this.attemptId && job.attemptStatus === 'running';
    if (!running) {
      await this.#release();
      this.#resolveDone();
      return;
    }
    const shipper = new LogShipper(this.ctx.bus.js, this.msg.jobId, this.msg.attempt, box.logFile, {
      writtenBy: 'process',
      limitBytes: this.opts.runtime.logLimitBytes,
      workerId: this.opts.name,
      attemptId: this.attemptId,
      ...(this.msg.rank && { rank: this.msg.rank }),
    });
    const outputs = new OutputMirror(
      box.outputDir,
      this.msg.jobId,
      this.attemptId,
      this.ctx.written,
      this.#user?.uid,
    );
    const metrics = this.#metricsOf(box, false);
    this.#startedAt = Date.now();
    markSandbox(box, this.msg, this.#startedAt, this.#user);
    this.#process = this.opts.runtime.start(
      runSpecIn(box, this.msg, this.#user, this.ctx.gpus),
      (_stream, chunk) => {
        shipper.write(chunk);
        metrics?.output(chunk);
      },
    );
    // A stop that came while the start was confirmed found no process yet: it stops it now.
    if (this.#stopAsked) void this.cancel();
    void this.#supervise(await this.#process, shipper, outputs, metrics, false);
  }

  /**
   * Takes over an attempt that an earlier run of this worker started and that the log still
   * gives it: reads its output on from what the live log holds, and reports its end. False when
   * the runtime cannot attach to it (it is gone without a recorded exit); it is failed then.
   */
  async resume(box: Sandbox, pid: number, startedAt: number, user?: JobUser): Promise<boolean> {
    this.#box = box;
    this.#user = user;
    if (user) await this.opts.users?.adopt(user, box.root);
    this.#startedAt = startedAt;
    const { jobId, attempt } = this.msg;
    const offset = await shippedBytes(this.ctx.bus, jobId, attempt, this.opts.name);
    const shipper = new LogShipper(this.ctx.bus.js, this.msg.jobId, this.msg.attempt, box.logFile, {
      writtenBy: 'process',
      limitBytes: this.opts.runtime.logLimitBytes,
      offset,
      workerId: this.opts.name,
      attemptId: this.attemptId,
      ...(this.msg.rank && { rank: this.msg.rank }),
    });
    const metrics = this.#metricsOf(box, true);
    await metrics?.rescan(box.logFile, offset);
    const attached = await this.opts.runtime
      .attach?.(runSpecIn(box, this.msg, user, this.ctx.gpus), pid, offset, (_s, chunk) => {
        shipper.write(chunk);
        metrics?.output(chunk);
      })
      .catch(async (err: unknown) => {
        await metrics?.end();
        throw err;
      });
    if (!attached) {
      await metrics?.end();
      await this.#fail(failure('processLost', 'the command was gone when its worker restarted'));
      await this.#release();
      this.#resolveDone();
      return false;
    }
    this.#process = Promise.resolve(attached);
    void this.#supervise(
      attached,
      shipper,
      new OutputMirror(
        box.outputDir,
        this.msg.jobId,
        this.attemptId,
        this.ctx.written,
        this.#user?.uid,
      ),
      metrics,
      true,
    );
    return true;
  }

  /**
   * What reads the attempt's training metrics (`resumed`: as far on as the worker before sent
   * them); none for a probe, which keeps nothing (its metrics file included).
   */
  #metricsOf(box: Sandbox, resumed: boolean): MetricsCollector | null {
    if (this.msg.probe) return null;
    return new MetricsCollector(
      this.ctx.bus.js,
      Subjects.attemptMetrics(this.msg.jobId, this.msg.attempt, this.opts.name),
      this.ctx.log,
      { file: box.metricsFile, progressFile: box.metricsProgress, resumed, signal: this.stopping },
    );
  }

  async #supervise(
    proc: RunningAttempt,
    shipper: LogShipper,
    outputs: OutputMirror,
    metrics: MetricsCollector | null,
    resumed: boolean,
  ): Promise<void> {
    const sync = async () => {
      const files = await outputs.scan();
      if (files) await this.#report({ type: 'SyncOutputs', attemptId: this.attemptId, files });
    };
    let syncing: Promise<void> = Promise.resolve();
    const probe = this.msg.probe;
    // A probe keeps nothing: it is stopped after its first steps, and the job runs afresh.
    const timer = probe
      ? undefined
      : setInterval(() => {
          syncing = syncing.then(sync).catch((err: unknown) => {
            this.ctx.log.warn(
              { err, jobId: this.msg.jobId },
              'output sync failed; the next one tries again',
            );
          });
        }, this.opts.outputSyncMs);
    const limit = this.msg.timeLimitS;
    const unwatch = probe
      ? watchProbe(proc, {
          probeDir: this.#box!.probeDir,
          deadlineMs: this.#startedAt + probe.timeoutMs,
          killGraceMs: this.opts.killGraceMs,
          onTimedOut: () => (this.#probeTimedOut = true),
          onStopFailed: (err, why) => this.#logError(`could not stop the probe ${why}`)(err),
        })
      : limit === undefined
        ? undefined
        : watchTimeLimit(() => this.cancel(), {
            deadlineMs: this.#startedAt + limit * 1000 + this.opts.timeLimitMarginMs,
            onReached: () => {
              this.#timeLimited = true;
              this.ctx.log.warn(
                { jobId: this.msg.jobId, timeLimit: limit },
                'no stop came from the control plane at the job’s time limit: the worker stops it',
              );
            },
            onStopFailed: this.#logError('could not stop the attempt'),
          });
    this.#health = watchHealth(this.msg.service, {
      open: this.opts.runtime.channel ? (request) => this.openShell(request) : null,
      resumed,
      stop: () => this.#stop(),
      log: this.ctx.log.child({ jobId: this.msg.jobId }),
    });
    try {
      const exit = await proc.exited;
      this.#exited = true;
      this.#health.end();
      await this.#shells?.close();
      clearInterval(timer);
      unwatch?.();
      await syncing;
      await metrics?.end();
      const reported = await this.#untilDone('report the end of the attempt', async () => {
        if (!probe) await sync();
        await shipper.end();
        await this.#finish(exit);
      });
      if (shipper.droppedBytes > 0) {
        this.ctx.log.warn(
          { jobId: this.msg.jobId, bytes: shipper.droppedBytes },
          'live log incomplete; the archive has it all',
        );
      }
      if (!reported) return;
      await this.#untilDone('archive the log', () => shipper.archive(this.ctx.written));
      await this.#release();
    } finally {
      clearInterval(timer);
      this.#resolveDone();
    }
  }

  /**
   * Lets go of what the attempt held on the host: the uid and the sandbox. Nothing of its user
   * outlives it: the kernel emptied its PID namespace as it ended.
   */
  async #release(): Promise<void> {
    this.#exited = true;
    await this.#shells?.close();
    const attached = this.#box !== null && new Shells(this.#box.root).opened;
    await this.opts.runtime
      .remove?.(this.attemptId)
      .catch(this.#logError('could not remove the attempt’s container'));
    const failed = this.#logError('could not end the attempt’s uid: its sandbox is kept');
    if (await releaseUser(this.opts.users, this.#user, failed, !attached))
      await removeSandbox(this.#box);
  }

  /** Logs what went wrong as `what`. */
  #logError(what: string): (err: unknown) => void {
    return (err) => this.ctx.log.error({ err, jobId: this.msg.jobId }, what);
  }

  /** Runs `step` until it succeeds, or until the worker stops (false then). */
  #untilDone(what: string, step: () => Promise<void>): Promise<boolean> {
    return untilDone(this.ctx.log, this.msg.jobId, what, step, this.stopping);
  }

  async #finish(exit: ProcessExit): Promise<void> {
    if (this.#stoppedByWorker) {
      await this.#fail(failure('workerStopped', 'the worker stopped while the attempt ran'));
      return;
    }
    if (this.msg.probe && this.#box) {
      await this.#report({
        type: 'FinishProbe',
        attemptId: this.attemptId,
        exit,
        report: probeReportIn(this.#box.probeDir),
        timedOut: this.#probeTimedOut,
        durationMs: Date.now() - this.#startedAt,
      });
      return;
    }
    await this.#report({
      type: 'FinishAttempt',
      attemptId: this.attemptId,
      exit,
      durationMs: Date.now() - this.#startedAt,
      ...(this.#stopAsked && { stopped: true }),
      ...(this.#timeLimited && { timeLimited: true }),
      ...(!this.#stopAsked && verdictReport(this.#health)),
    });
  }

  async #fail(why: Failure): Promise<void> {
    await this.#report({ type: 'FailAttempt', attemptId: this.attemptId, failure: why });
  }

  /**
   * Opens a channel beside the running attempt (`trainyard ssh JOB_ID`), as its user, with its
   * environment; refused once it stops. The attempt's end then ends every process of its user.
   */
  async openShell(request: ChannelRequest): Promise<Channel> {
    const { runtime } = this.opts;
    const box = this.#box;
    if (!this.#process || !box || this.#exited || this.#stopping || !runtime.channel) {
      throw new ChannelRefused('noSuchRun', `job ${this.msg.jobId} is not running`);
    }
    this.#shells ??= new Shells(box.root);
    const spec = runSpecIn(box, this.msg, this.#user, this.ctx.gpus);
    const channel = await this.#shells.open(runtime, spec, request);
    if (this.#exited) {
      channel.close();
      throw new ChannelRefused('noSuchRun', `job ${this.msg.jobId} has ended`);
    }
    return channel;
  }

  /** Stops the process when asked to (a cancel, a time limit): its exit reads as stopped. */
  async cancel(): Promise<void> {
    this.#stopAsked = true;
    await this.#stop();
  }

  /** Stops the process because the worker is going away: reported as a platform failure. */
  async abandon(): Promise<void> {
    this.#stoppedByWorker = true;
    await this.#stop();
    await this.done;
  }

  /** Stops the process with its grace, and closes the shells, which would hold a container. */
  async #stop(): Promise<void> {
    this.#stopping = true;
    await Promise.all([this.#shells?.close(), (await this.#process)?.kill(this.opts.killGraceMs)]);
  }
}
