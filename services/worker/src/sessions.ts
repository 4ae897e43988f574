import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { archiveLimits } from '@trainyard/blobs';
import { failure } from '@trainyard/domain';
import { JOB_ID_PATTERN, type StartRun, type StopRun } from '@trainyard/events';
import { sendReport, type SessionReport } from '@trainyard/application';
import { openLocalChannel, type SessionContainer } from '@trainyard/runtime';
import {
  ChannelRefused,
  serveTunnel,
  type Channel,
  type ChannelRequest,
  type ChannelTarget,
} from '@trainyard/tunnel';
import type { Logger } from '@trainyard/service-kit';
import type { AttemptRun } from './attempt.ts';
import type { WorkerContext, WorkerOptions } from './options.ts';
import { chownTree, SandboxError, unpackCode } from './code.ts';
import { limitsOf } from './sandbox.ts';
import { type JobUser, releaseUser } from './users.ts';

const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/;
const PREFIX = 'session-';
const MARKER = 'session.json';

/**
 * A session's run on this worker: its directory, its user, its container when it runs in one,
 * and the channels open in it.
 */
interface HeldRun {
  sessionId: string;
  runId: string;
  root: string;
  user: JobUser | undefined;
  container: SessionContainer | null;
  /** Opens a channel in the run: in its home on this host, or in its container. */
  open(request: ChannelRequest): Promise<Channel>;
  channels: Set<Channel>;
}

/**
 * The session runs this worker holds. A run is a home directory (`session-RUN/home` under the
 * sandbox root, the session's own, closed to everyone else, holding the session's code when it
 * has some) and a uid of its own; or, for a session with an image, a container of that image
 * running as that uid. The SSH channels the gateway opens in it run there as that uid, carried
 * over the tunnel. Ending a run closes its channels, removes its container, ends every process
 * of its uid (so nothing started in it outlives it) and removes its directory. A run does not
 * survive the worker's restart: the control plane places the session again (the runtime's
 * sweep removes the containers left).
 */
export class SessionRuns {
  readonly #runs = new Map<string, HeldRun>();
  /** Runs whose start is being prepared. */
  readonly #starting = new Set<string>();
  readonly #log: Logger;
  #tunnel: { stop(): Promise<void> } | null = null;

  constructor(
    private readonly ctx: WorkerContext,
    private readonly opts: WorkerOptions,
    private readonly workerId: string,
    /** The attempts running here, by id: a shell may open beside one. */
    private readonly attempts: (attemptId: string) => AttemptRun | undefined = () => undefined,
  ) {
    this.#log = ctx.log.child({ component: 'sessions', workerId });
  }

  /** Removes what runs of an earlier start of this worker left, ending their processes. */
  async sweep(): Promise<void> {
    const entries = await readdir(this.opts.sandboxRoot).catch(() => [] as string[]);
    for (const name of entries.filter((n) => n.startsWith(PREFIX))) {
      const root = join(this.opts.sandboxRoot, name);
      const user = await readFile(join(root, MARKER), 'utf8')
        .then((t) => (JSON.parse(t) as { user?: JobUser }).user)
        .catch(() => undefined);
      if (await this.#remove(root, user))
        this.#log.warn({ dir: root }, 'removed a session run left by an earlier start');
    }
  }

  /** Starts answering the gateway's channels for the runs held here. */
  serve(): void {
    this.#tunnel = serveTunnel(this.ctx.bus.nc, this.workerId, this, {
      onActivity: (target: ChannelTarget, open: number) => {
        // A job has no idle timer: a shell beside it is no session's activity.
        if (open > 1 || JOB_ID_PATTERN.test(target.sessionId)) return;
        void this.#report(target.sessionId, {
          type: 'RecordActivity',
          runId: target.runId,
          active: open === 1,
        });
      },
    });
  }

  /** The ids of the runs held here. */
  held(): string[] {
    return [...this.#runs.keys()];
  }

  /**
   * Opens a channel in a run held here, or beside a job's attempt running here (the tunnel calls
   * it for the gateway, which names a job's attempt as the run of a target named by the job).
   */
  async open(target: ChannelTarget, request: ChannelRequest): Promise<Channel> {
    if (JOB_ID_PATTERN.test(target.sessionId)) return this.#openBeside(target, request);
    const run = this.#runs.get(target.runId);
    if (!run || run.sessionId !== target.sessionId) {
      throw new ChannelRefused('noSuchRun', `session ${target.sessionId} does not run here`);
    }
    const channel = await run.open(request);
    run.channels.add(channel);
    void channel.exit.then(() => run.channels.delete(channel));
    return channel;
  }

  /** A channel beside a running attempt, in its sandbox or container; closed as it ends. */
  async #openBeside(target: ChannelTarget, request: ChannelRequest): Promise<Channel> {
    const attempt = this.attempts(target.runId);
    if (!attempt || attempt.msg.jobId !== target.sessionId) {
      throw new ChannelRefused('noSuchRun', `job ${target.sessionId} does not run here`);
    }
    return attempt.openShell(request);
  }

  /** Prepares a run's home and user, then reports it started; a refused start is undone. */
  async start(msg: StartRun): Promise<void> {
    // A dispatch sent again while the first is still being prepared: the first reports.
    if (this.#starting.has(msg.runId)) return;
    this.#starting.add(msg.runId);
    try {
      await this.#start(msg);
    } finally {
      this.#starting.delete(msg.runId);
    }
  }

  async #start(msg: StartRun): Promise<void> {
    // A dispatch sent again (its report may have been lost): say again that it runs.
    const held = this.#runs.get(msg.runId);
    if (held) {
      const reply = await this.#report(msg.sessionId, { type: 'StartRun', runId: msg.runId });
      if (reply && !reply.ok) await this.#end(held);
      return;
    }
    if (!SAFE_ID.test(msg.runId) || !SAFE_ID.test(msg.sessionId)) {
      this.#log.error({ runId: msg.runId }, 'a session run with a malformed id was dropped');
      return;
    }
    const root = join(this.opts.sandboxRoot, `${PREFIX}${msg.runId}`);
    const home = join(root, 'home');
    let user: JobUser | undefined;
    let container: SessionContainer | null = null;
    try {
      // The run's directory stays the worker's, passable but not listable; its home is the
      // session's own.
      await mkdir(root, { recursive: true, mode: 0o711 });
      await mkdir(home, { mode: 0o700 });
      user = await this.opts.users?.claim(msg.runId, root);
      await writeFile(join(root, MARKER), JSON.stringify({ user }), { mode: 0o600 });
      if (msg.code) {
        await unpackCode(this.ctx.reads(), msg.code, root, home, archiveLimits(this.ctx.config));
      }
      if (user) chownTree(home, user);
      if (msg.image) container = await this.#startContainer(msg, msg.image, user);
    } catch (err) {
      this.#log.error({ err, sessionId: msg.sessionId }, 'could not prepare a session run');
      await this.#remove(root, user);
      await this.#report(msg.sessionId, {
        type: 'EndRun',
        runId: msg.runId,
        failure:
          err instanceof SandboxError
            ? err.failure
            : failure('launchError', `the worker could not prepare the session: ${String(err)}`),
      });
      return;
    }
    const place = {
      dir: home,
      ...(user && { uid: user.uid, gid: user.gid }),
      env: {
        HOME: home,
        PATH: '/usr/local/bin:/usr/bin:/bin',
        LANG: 'C.UTF-8',
        CUDA_VISIBLE_DEVICES: msg.gpus.join(','),
        CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
        TRAINYARD_SESSION_ID: msg.sessionId,
      },
    };
    const run: HeldRun = {
      sessionId: msg.sessionId,
      runId: msg.runId,
      root,
      user,
      container,
      open: container ? container.open : (request) => openLocalChannel(place, request),
      channels: new Set(),
    };
    this.#runs.set(msg.runId, run);
    const reply = await this.#report(msg.sessionId, { type: 'StartRun', runId: msg.runId });
    if (reply && !reply.ok) await this.#end(run);
  }

  /** Starts a run's container, on a worker whose runtime runs containers. */
  async #startContainer(
    msg: StartRun,
    image: string,
    user: JobUser | undefined,
  ): Promise<SessionContainer> {
    const { runtime } = this.opts;
    if (!runtime.startSession) {
      throw new SandboxError(
        failure('launchError', `this worker runs no containers (its runtime is ${runtime.kind})`),
      );
    }
    try {
      return await runtime.startSession({
        sessionId: msg.sessionId,
        runId: msg.runId,
        image,
        gpus: msg.gpus,
        ...(user && { user: { uid: user.uid, gid: user.gid } }),
        ...limitsOf(msg, this.ctx.gpus),
      });
    } catch (err) {
      throw new SandboxError(
        failure('launchError', `the session's container could not start: ${String(err)}`),
      );
    }
  }

  /** Ends a run the session no longer holds, and reports it ended. */
  async stop(msg: StopRun): Promise<void> {
    const run = this.#runs.get(msg.runId);
    if (run) await this.#end(run);
    await this.#report(msg.sessionId, { type: 'EndRun', runId: msg.runId, failure: null });
  }

  /**
   * Ends every run without a report: the worker was declared lost, or stops, and the control
   * plane places their sessions again.
   */
  async abandon(): Promise<void> {
    await Promise.all([...this.#runs.values()].map((r) => this.#end(r)));
  }

  /** Stops answering channels and ends every run, as the worker stops. */
  async close(): Promise<void> {
    await this.#tunnel?.stop();
    await this.abandon();
  }

  async #end(run: HeldRun): Promise<void> {
    this.#runs.delete(run.runId);
    for (const channel of run.channels) channel.close();
    await Promise.all([...run.channels].map((c) => c.exit));
    await run.container
      ?.end()
      .catch((err: unknown) =>
        this.#log.warn({ err, runId: run.runId }, 'could not remove a session’s container'),
      );
    await this.#remove(run.root, run.user);
  }

  /** Ends the run's processes, then removes its directory; false, keeping it, where they live. */
  async #remove(root: string, user: JobUser | undefined): Promise<boolean> {
    const failed = (err: unknown) =>
      this.#log.error({ err, dir: root }, 'could not end a session’s uid: its directory is kept');
    if (!(await releaseUser(this.opts.users, user, failed))) return false;
    await rm(root, { recursive: true, force: true });
    return true;
  }

  /** Reports on a session's run; a refusal is logged and returned, a failure to send logged. */
  async #report(sessionId: string, report: SessionReport) {
    try {
      const reply = await sendReport(this.ctx.bus.nc, this.workerId, {
        kind: 'session',
        sessionId,
        report,
      });
      if (!reply.ok) {
        this.#log.warn({ sessionId, code: reply.code }, `session report refused: ${reply.message}`);
      }
      return reply;
    } catch (err) {
      this.#log.warn({ err, sessionId, report: report.type }, 'could not report on a session');
      return null;
    }
  }
}
