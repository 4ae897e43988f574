import { spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep, Subjects, type StoredEvent } from '@trainyard/events';
import { startStack, type Stack } from '@trainyard/stack';
import { tempDir, waitFor } from '@trainyard/testkit';

const HOST = resolve(fileURLToPath(new URL('./worker-host.ts', import.meta.url)));

export interface JobTimes {
  submittedMs?: number;
  assignedMs?: number;
  startedMs?: number;
  finishedMs?: number;
  status?: string;
}

/**
 * `TRAINYARD_BENCH_CPU_PROF=DIR` writes a CPU profile of each worker process into DIR (start the
 * bench itself with `node --cpu-prof` to profile the control plane).
 */
function profileFlags(): string[] {
  const dir = process.env.TRAINYARD_BENCH_CPU_PROF;
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(dir)}`] : [];
}

/** The control plane in this process, simulated workers as child processes. */
export class BenchCluster {
  readonly times = new Map<string, JobTimes>();
  #workers: ChildProcess[] = [];
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 256 });
  #stopTracking: (() => void) | null = null;
  private constructor(
    readonly stack: Stack,
    private readonly home: Awaited<ReturnType<typeof tempDir>>,
    readonly token: string,
  ) {}

  static async start(): Promise<BenchCluster> {
    const home = await tempDir('trainyard-bench-');
    const stack = await startStack({
      home: home.path,
      natsPort: 0,
      apiPort: 0,
      apiHost: '127.0.0.1',
      adminPassword: 'bench-keeper-pass',
      worker: null,
      fastPostgres: true,
    });
    const cluster = new BenchCluster(
      stack,
      home,
      await stack.api.issueToken({ username: 'admin', role: 'admin' }),
    );
    await cluster.#track();
    return cluster;
  }

  /**
   * Starts `count` workers with simulated GPUs of `shape`, spread over `processes` worker
   * processes (one worker per process by default), with their sandboxes under `sandboxes`
   * (default the temp directory), and waits until all are online.
   */
  async addWorkers(
    prefix: string,
    count: number,
    shape: string,
    opts: { processes?: number; simulateRuntime?: boolean; sandboxes?: string } = {},
  ): Promise<void> {
    const processes = opts.processes ?? count;
    const perProcess = Math.ceil(count / processes);
    for (let p = 0; p < processes; p++) {
      const n = Math.min(perProcess, count - p * perProcess);
      if (n <= 0) break;
      const child = spawn(
        process.execPath,
        [
          ...profileFlags(),
          '--import',
          'tsx',
          HOST,
          `${prefix}${p}x`,
          String(n),
          shape,
          opts.sandboxes ?? tmpdir(),
          ...(opts.simulateRuntime ? ['--simulate-runtime'] : []),
        ],
        {
          stdio: ['ignore', 'ignore', 'inherit'],
          env: {
            ...process.env,
            TRAINYARD_NATS_URL: this.stack.natsUrl,
            TRAINYARD_LOG_LEVEL: 'warn',
          },
        },
      );
      this.#workers.push(child);
    }
    await waitFor(
      `${count} workers`,
      async () => {
        const res = await fetch(`${this.stack.api.url}/v1/workers`, {
          headers: { authorization: `Bearer ${this.token}` },
        });
        const list = (await res.json()) as { id: string; status: string }[];
        return list.filter((w) => w.id.startsWith(prefix) && w.status === 'online').length >= count;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  }

  workerPids(): number[] {
    return this.#workers.map((w) => w.pid!).filter(Boolean);
  }

  async stopWorkers(): Promise<void> {
    await Promise.all(
      this.#workers.map(
        (w) =>
          new Promise<void>((res) => {
            w.once('exit', () => res());
            w.kill('SIGTERM');
          }),
      ),
    );
    this.#workers = [];
  }

  /** Reads the job events as one more follower of the stack's reader of the log. */
  async #track(): Promise<void> {
    const { events, bus } = this.stack.ctx;
    const stop = new AbortController();
    this.#stopTracking = () => stop.abort();
    let next = (await bus.store.lastSeq()) + 1;
    const record = (e: StoredEvent) => {
      next = e.seq + 1;
      const t = this.times.get(e.aggregateId) ?? {};
      const at = Date.parse(e.occurredAt);
      if (e.type === 'JobSubmitted') t.submittedMs = at;
      else if (e.type === 'JobAssigned') t.assignedMs = at;
      else if (e.type === 'JobStarted') t.startedMs = at;
      else if (
        e.type === 'JobSucceeded' ||
        e.type === 'JobAttemptFailed' ||
        e.type === 'JobCancelled'
      ) {
        t.finishedMs = at;
        t.status = e.type;
      }
      this.times.set(e.aggregateId, t);
    };
    void (async () => {
      while (!stop.signal.aborted) {
        await events
          .follow(
            { fromSeq: next, filter: Subjects.aggregateEvents('job'), signal: stop.signal },
            record,
          )
          .catch(async (err: unknown) => {
            console.error('bench tracker:', err);
            await sleep(500, stop.signal);
          });
      }
    })();
  }

  /**
   * Submits one job over HTTP (JSON spec, no code: no build, VRAM declared: no estimation). It
   * uses node:http on kept-alive connections: the load generator shares the machine's cores with
   * what it measures, and fetch costs several times more CPU per request.
   */
  submit(command = 'true'): Promise<string> {
    const body = JSON.stringify({
      name: 'bench',
      command,
      resources: { gpus: 1, vramGb: 20 },
      maxRetries: 0,
    });
    const url = new URL('/v1/jobs', this.stack.api.url);
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'POST',
          agent: this.#agent,
          headers: {
            authorization: `Bearer ${this.token}`,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            if (res.statusCode !== 202)
              reject(new Error(`submit answered ${res.statusCode}: ${text}`));
            else resolve((JSON.parse(text) as { id: string }).id);
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  /** Submits `n` jobs with `concurrency` requests in flight. */
  async submitMany(n: number, concurrency: number): Promise<string[]> {
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) {
          next++;
          ids.push(await this.submit());
        }
      }),
    );
    return ids;
  }

  /** Waits until every job in `ids` has finished; each check looks only at those still running. */
  async waitFinished(ids: string[], timeoutMs: number): Promise<void> {
    let running = ids;
    await waitFor(
      `${ids.length} jobs to finish`,
      () => {
        running = running.filter((id) => this.times.get(id)?.finishedMs === undefined);
        return running.length === 0;
      },
      { timeoutMs, intervalMs: 50 },
    );
  }

  async stop(): Promise<void> {
    this.#stopTracking?.();
    this.#agent.destroy();
    await this.stopWorkers();
    await this.stack.stop();
    await this.home.remove();
  }
}
