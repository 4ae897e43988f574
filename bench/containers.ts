import { loadJob } from '@trainyard/application';
import {
  DockerRuntime,
  dockerAt,
  ensureLocalBaseImage,
  NoGpuInventory,
  ProcessRuntime,
  type Runtime,
} from '@trainyard/runtime';
import { canStartDockerEngine, startDockerEngine, startRegistry } from '@trainyard/servers';
import { startStack, type Stack } from '@trainyard/stack';
import { tempDir, waitFor } from '@trainyard/testkit';
import { summary } from './stats.ts';

/**
 * The container path next to the process runtime: the same small job, submitted one after
 * another to a stack whose worker runs attempts as processes, then to one whose worker runs them
 * in containers (built once, then taken from the build cache). Each figure is read from the
 * decider's times in the log: submission, start and end of the attempt.
 */
export async function containerBench(jobs: number) {
  if (!canStartDockerEngine())
    return { skipped: 'no Docker engine here (root and Debian’s docker.io are needed)' };
  const dir = await tempDir('trainyard-bench-docker-');
  const engine = await startDockerEngine({ dir: `${dir.path}/engine` });
  const registry = await startRegistry({ dir: `${dir.path}/registry` });
  try {
    const docker = dockerAt(engine.url);
    await ensureLocalBaseImage(docker);
    const processes = new ProcessRuntime();
    const onHost = await runJobs(processes, null, jobs);
    const containers = new DockerRuntime({ docker, workerName: 'local', gpuDevices: 'none' });
    const inContainers = await runJobs(
      containers,
      { dockerHost: engine.url, registry: registry.url },
      jobs,
    );
    return { jobs, processRuntime: onHost, dockerRuntime: inContainers };
  } finally {
    await registry.stop();
    await engine.stop();
    await dir.remove();
  }
}

async function runJobs(
  runtime: Runtime,
  containers: { dockerHost: string; registry: string } | null,
  jobs: number,
) {
  const home = await tempDir('trainyard-bench-rt-');
  const sandboxes = await tempDir('trainyard-bench-sb-', '/var/tmp');
  const stack = await startStack({
    home: home.path,
    natsPort: 0,
    apiPort: 0,
    apiHost: '127.0.0.1',
    adminPassword: 'bench-keeper-pass',
    fastPostgres: true,
    ...(containers && { containers }),
    worker: {
      name: 'local',
      inventory: new NoGpuInventory(),
      runtime,
      cpuSlots: 1,
      sandboxRoot: sandboxes.path,
      heartbeatMs: 1_000,
      outputSyncMs: 1_000,
      killGraceMs: 2_000,
      timeLimitMarginMs: 60_000,
      version: 'bench',
    },
  });
  try {
    const token = await stack.api.issueToken({ username: 'admin', role: 'admin' });
    // The first builds the image (in containers); the rest take it from the cache.
    const first = await oneJob(stack, token);
    const times = [];
    for (let i = 0; i < jobs; i++) times.push(await oneJob(stack, token));
    return {
      firstSubmitToRunningMs: first.submitToRunning,
      submitToRunningMs: summary(times.map((t) => t.submitToRunning)),
      attemptMs: summary(times.map((t) => t.attempt)),
    };
  } finally {
    await stack.stop();
    await sandboxes.remove();
    await home.remove();
  }
}

/** Submits `python3 -c pass` and waits for it; its times from the log. */
async function oneJob(stack: Stack, token: string) {
  const res = await fetch(`${stack.api.url}/v1/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'bench',
      command: 'python3 -c pass',
      resources: { gpus: 0 },
      maxRetries: 0,
    }),
  });
  if (res.status !== 202) throw new Error(`submit: ${res.status} ${await res.text()}`);
  const { id } = (await res.json()) as { id: string };
  const state = await waitFor(
    `job ${id} to finish`,
    async () => {
      const { state } = await loadJob(stack.ctx.bus.store, id);
      return state.status === 'succeeded' || state.status === 'failed' ? state : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 20 },
  );
  if (state.status !== 'succeeded') throw new Error(`job ${id} ${state.status}`);
  const attempt = state.attempts[0]!;
  const at = (iso: string | null) => Date.parse(iso!);
  return {
    submitToRunning: at(attempt.startedAt) - at(state.submittedAt),
    attempt: at(attempt.finishedAt) - at(attempt.startedAt),
  };
}
