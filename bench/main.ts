import { accessSync, constants } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { appendCeiling } from './append.ts';
import { containerBench } from './containers.ts';
import { gatewayBench } from './gateway.ts';
import { BenchCluster } from './cluster.ts';
import { pidsMatching } from '@trainyard/testkit';
import { CpuMeter } from './cpu.ts';
import { policyBench } from './policy.ts';
import { startupBench } from './startup.ts';
import { summary } from './stats.ts';

process.env.TRAINYARD_LOG_LEVEL ??= 'warn';
const quick = process.argv.includes('--quick');
const PARTS = ['small', 'ceiling', 'startup', 'containers', 'gateway', 'policy'] as const;
const onlyArg = process.argv.find((a) => a.startsWith('--only='))?.slice('--only='.length);
const parts = new Set(onlyArg ? onlyArg.split(',') : PARTS);
for (const part of parts)
  if (!(PARTS as readonly string[]).includes(part))
    throw new Error(`--only takes a list of ${PARTS.join(', ')}; got "${part}"`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Where the workers keep their sandboxes: `--sandboxes=DIR`, else memory (/dev/shm) where there
 * is one, so that the figures are the scheduler's rather than the disk's. The small cluster's
 * burst runs again with them on disk (the temp directory), and both are printed.
 */
function sandboxesDir(): string {
  const chosen = process.argv
    .find((a) => a.startsWith('--sandboxes='))
    ?.slice('--sandboxes='.length);
  if (chosen) return chosen;
  try {
    accessSync('/dev/shm', constants.W_OK);
    return '/dev/shm';
  } catch {
    return tmpdir();
  }
}
const sandboxes = sandboxesDir();
const diskSandboxes = tmpdir();

function latencies(cluster: BenchCluster, ids: string[]) {
  return summary(ids.map((id) => cluster.times.get(id)!).map((t) => t.startedMs! - t.submittedMs!));
}

/** Where the time goes: queueing before assignment, dispatch to start, and the run itself. */
function phases(cluster: BenchCluster, ids: string[]) {
  const times = ids.map((id) => cluster.times.get(id)!);
  return {
    submitToAssignMs: summary(times.map((t) => t.assignedMs! - t.submittedMs!)),
    assignToStartMs: summary(times.map((t) => t.startedMs! - t.assignedMs!)),
    startToFinishMs: summary(times.map((t) => t.finishedMs! - t.startedMs!)),
  };
}

function throughput(cluster: BenchCluster, ids: string[]) {
  const times = ids.map((id) => cluster.times.get(id)!);
  const first = Math.min(...times.map((t) => t.submittedMs!));
  const last = Math.max(...times.map((t) => t.finishedMs!));
  const failed = times.filter((t) => t.status !== 'JobSucceeded').length;
  return {
    jobs: ids.length,
    failed,
    makespanMs: last - first,
    jobsPerSecond: Math.round((ids.length / (last - first)) * 1000 * 10) / 10,
  };
}

/** CPU ms per job spent by each part of the system during a run. */
function cpuMeter(cluster: BenchCluster) {
  const pidOf = (c: { pid: number }) => [c.pid];
  const [nats, pg] = cluster.stack.children;
  return new CpuMeter({
    controlPlane: () => [process.pid],
    workers: () => cluster.workerPids(),
    attemptProcesses: () => pidsMatching('trainyard-spawner'),
    natsServer: () => (nats ? pidOf(nats) : []),
    postgres: () => (pg ? [pg.pid, ...pidsMatching('postgres: ')] : []),
  });
}

function cpuLine(cpu: Record<string, number>): string {
  return Object.entries(cpu)
    .map(([part, ms]) => `${part} ${ms} ms`)
    .join(', ');
}

function perJob(cpu: Record<string, number>, jobs: number) {
  return Object.fromEntries(
    Object.entries(cpu).map(([k, ms]) => [k, Math.round((ms / jobs) * 100) / 100]),
  );
}

/**
 * 4 workers x 2 simulated GPUs take `n` jobs running `true`, submitted back to back, after a
 * fifth as many that warm up the code paths and are not counted.
 */
async function burst(cluster: BenchCluster, prefix: string, dir: string, n: number) {
  await cluster.addWorkers(prefix, 4, '2x24GiB', { processes: 2, sandboxes: dir });
  await cluster.waitFinished(await cluster.submitMany(n / 5, 64), 300_000);
  const meter = cpuMeter(cluster);
  meter.mark();
  const ids = await cluster.submitMany(n, 64);
  await cluster.waitFinished(ids, 300_000);
  return {
    ...throughput(cluster, ids),
    submitToStartMs: latencies(cluster, ids),
    phases: phases(cluster, ids),
    cpuMsPerJob: perJob(meter.since(), n),
  };
}

async function smallCluster(cluster: BenchCluster) {
  const n = quick ? 200 : 1000;
  const main = await burst(cluster, 'small', sandboxes, n);
  const probe: string[] = [];
  for (let i = 0; i < 20; i++) {
    await sleep(1500);
    probe.push(await cluster.submit());
  }
  await cluster.waitFinished(probe, 60_000);
  await cluster.stopWorkers();
  let onDisk = null;
  if (sandboxes !== diskSandboxes) {
    onDisk = { sandboxes: diskSandboxes, ...(await burst(cluster, 'disk', diskSandboxes, n)) };
    await cluster.stopWorkers();
  }
  return {
    workers: 4,
    workerProcesses: 2,
    gpusPerWorker: 2,
    simulatedGpus: true,
    sandboxes,
    burst: main,
    idleProbe: {
      jobs: 20,
      spacingMs: 1500,
      submitToStartMs: latencies(cluster, probe),
      phases: phases(cluster, probe),
    },
    onDisk,
  };
}

async function ceiling(cluster: BenchCluster) {
  const raw = await appendCeiling(cluster.stack.ctx.bus, quick ? 5_000 : 20_000);
  const workers = 16;
  const gpus = 8;
  await cluster.addWorkers('ceil', workers, `${gpus}x80GiB`, {
    processes: 2,
    simulateRuntime: true,
    sandboxes,
  });
  const n = quick ? 500 : 3000;
  const meter = cpuMeter(cluster);
  meter.mark();
  const ids = await cluster.submitMany(n, 128);
  await cluster.waitFinished(ids, 600_000);
  const e2e = { ...throughput(cluster, ids), cpuMsPerJob: perJob(meter.since(), n) };
  const appendsPerJob = 4;
  await cluster.stopWorkers();
  return {
    workers,
    gpusPerWorker: gpus,
    simulatedGpus: true,
    simulatedRuntime: true,
    workerProcesses: 2,
    sandboxes,
    endToEnd: { ...e2e, submitToRunningMs: latencies(cluster, ids), phases: phases(cluster, ids) },
    rawAppendCeilingPerSecond: raw.perSecond,
    appendsPerJob,
    ratioOfCeiling: Math.round(((e2e.jobsPerSecond * appendsPerJob) / raw.perSecond) * 1000) / 1000,
  };
}

const cluster = parts.has('small') || parts.has('ceiling') ? await BenchCluster.start() : null;
try {
  const result = {
    at: new Date().toISOString(),
    machine: { cpus: (await import('node:os')).availableParallelism(), node: process.version },
    quick,
    smallCluster: cluster && parts.has('small') ? await smallCluster(cluster) : null,
    ceiling: cluster && parts.has('ceiling') ? await ceiling(cluster) : null,
    schedulerStartup: parts.has('startup') ? await startupBench(quick ? 10_000 : 100_000) : null,
    containers: parts.has('containers') ? await containerBench(quick ? 5 : 20) : null,
    gateway: parts.has('gateway')
      ? await gatewayBench((quick ? 50 : 200) * 1024 ** 2, quick ? 50 : 200, quick ? 1 : 3)
      : null,
    policy: parts.has('policy')
      ? policyBench(quick ? [1_000, 10_000] : [1_000, 10_000, 100_000], quick ? 5 : 20)
      : null,
  };
  const dir = 'bench-results';
  await mkdir(dir, { recursive: true });
  const file = join(dir, `bench-${result.at.replace(/[:.]/g, '-')}.json`);
  await writeFile(file, JSON.stringify(result, null, 2));
  const s = result.smallCluster;
  const c = result.ceiling;
  const u = result.schedulerStartup;
  const k = result.containers;
  const g = result.gateway;
  const p = result.policy;
  const sections = [
    'Trainyard benchmark (simulated GPUs; jobs skip build and estimation)',
    s &&
      `small cluster: ${s.workers} workers x ${s.gpusPerWorker} simulated GPUs in ${s.workerProcesses} processes, ${s.burst.jobs} jobs running \`true\`, sandboxes in ${s.sandboxes}
  completed        ${s.burst.jobsPerSecond} jobs/s, makespan ${s.burst.makespanMs} ms, failed ${s.burst.failed}
  submit->start    p50 ${s.burst.submitToStartMs.p50} ms  p90 ${s.burst.submitToStartMs.p90} ms  p99 ${s.burst.submitToStartMs.p99} ms
  cpu per job      ${cpuLine(s.burst.cpuMsPerJob)}
  idle probe       p50 ${s.idleProbe.submitToStartMs.p50} ms  p90 ${s.idleProbe.submitToStartMs.p90} ms  p99 ${s.idleProbe.submitToStartMs.p99} ms (target p50 < 10 ms)${
    s.onDisk
      ? `
  on disk          ${s.onDisk.jobsPerSecond} jobs/s (target >= 300) with the sandboxes in ${s.onDisk.sandboxes}, makespan ${s.onDisk.makespanMs} ms, failed ${s.onDisk.failed}
  cpu per job      ${cpuLine(s.onDisk.cpuMsPerJob)} (target: control plane < 1.5 ms)`
      : ''
  }`,
    c &&
      `ceiling: ${c.workers} workers x ${c.gpusPerWorker} simulated GPUs in ${c.workerProcesses} processes, simulated runtime (no processes spawned), ${c.endToEnd.jobs} jobs, sandboxes in ${c.sandboxes}
  end to end       ${c.endToEnd.jobsPerSecond} jobs/s (target >= 1500), failed ${c.endToEnd.failed}
  submit->running  p50 ${c.endToEnd.submitToRunningMs.p50} ms  p99 ${c.endToEnd.submitToRunningMs.p99} ms (target p99 < 100 ms)
  cpu per job      ${cpuLine(c.endToEnd.cpuMsPerJob)}
  raw append       ${c.rawAppendCeilingPerSecond} events/s (pipelined, msg id + expected sequence)
  ratio            ${c.appendsPerJob} appends/job x jobs/s / ceiling = ${c.ratioOfCeiling}`,
    u &&
      `scheduler start-up with ${u.jobs} jobs (${u.events} events) in the log
  full replay      ${u.fullReplayMs} ms
  from snapshot    ${u.fromSnapshotMs} ms (target < 2000 ms)`,
    k &&
      ('skipped' in k
        ? `containers: skipped, ${k.skipped}`
        : `containers: ${k.jobs} jobs running \`python3 -c pass\` one after another, after one that builds the image
  process runtime  submit->running p50 ${k.processRuntime.submitToRunningMs.p50} ms  p99 ${k.processRuntime.submitToRunningMs.p99} ms; attempt p50 ${k.processRuntime.attemptMs.p50} ms
  docker runtime   submit->running p50 ${k.dockerRuntime.submitToRunningMs.p50} ms  p99 ${k.dockerRuntime.submitToRunningMs.p99} ms (image from the build cache); attempt p50 ${k.dockerRuntime.attemptMs.p50} ms
  first build      submit->running ${k.dockerRuntime.firstSubmitToRunningMs} ms (the image built and pushed)`),
    g &&
      ('skipped' in g
        ? `ssh gateway: skipped, ${g.skipped}`
        : `ssh gateway: ${g.megabytes} MB with scp each way (a warm-up, then the median of ${g.rounds}) and ${g.echoes} one-byte echoes through \`cat\`, against a loopback sshd
  first transfer   direct up ${g.first.direct.uploadMBps}, down ${g.first.direct.downloadMBps} MB/s; gateway up ${g.first.gateway.uploadMBps}, down ${g.first.gateway.downloadMBps} MB/s (a gateway just started)
  direct sshd      up ${g.direct.uploadMBps} MB/s, down ${g.direct.downloadMBps} MB/s; echo p50 ${g.direct.echoMs.p50} ms  p99 ${g.direct.echoMs.p99} ms
  gateway          up ${g.gateway.uploadMBps} MB/s, down ${g.gateway.downloadMBps} MB/s; echo p50 ${g.gateway.echoMs.p50} ms  p99 ${g.gateway.echoMs.p99} ms (target p50 < 5 ms)
  ratio            up ${g.uploadRatio}, down ${g.downloadRatio} of direct (target >= 0.5)
  cpu a transfer   direct up ${cpuLine(g.cpuMsPerTransfer.direct.up)}; down ${cpuLine(g.cpuMsPerTransfer.direct.down)}
                   gateway up ${cpuLine(g.cpuMsPerTransfer.gateway.up)}; down ${cpuLine(g.cpuMsPerTransfer.gateway.down)}`),
    p &&
      `placement policy: one cycle of the pure policy over ${p[0]!.gpus} simulated GPUs (3 models, 8 a worker), mixed shapes, aging on
${p
  .map(
    (row) =>
      `  ${String(row.jobs).padStart(7)} jobs    first cycle ${row.firstCycle.ms} ms (placed ${row.firstCycle.placed}); steady p50 ${row.steadyCycleMs.p50} ms  p99 ${row.steadyCycleMs.p99} ms (placed ${row.placedPerSteadyCycle} a cycle, a reservation in ${row.cyclesWithReservation} of ${row.steadyCycleMs.n}, ${row.preemptionsPerSteadyCycle} preemptions); explain p50 ${row.explainMs.p50} ms`,
  )
  .join('\n')}
  target           a cycle < 50 ms at 100k jobs; quotas, backfill, preemption and gangs on`,
    `written to ${file}`,
  ];
  console.log(`\n${sections.filter(Boolean).join('\n\n')}`);
} finally {
  await cluster?.stop();
}
