import { createWriteStream } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import type { JobView } from '@trainyard/api';
import { newId, packDirectory } from '@trainyard/platform';
import { ApiClient, CliError } from '../client.ts';
import { multipartBody } from '../upload.ts';
import { printTable } from './table.ts';

const collect = (value: string, previous: string[]) => [...previous, value];

function parseEnv(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const i = pair.indexOf('=');
    if (i <= 0) throw new CliError(`--env wants NAME=VALUE, got "${pair}"`);
    env[pair.slice(0, i)] = pair.slice(i + 1);
  }
  return env;
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** Streams a job's log to stdout; with `follow`, until the job ends. */
export async function streamLogs(client: ApiClient, id: string, follow: boolean): Promise<void> {
  const res = await client.request(
    `/v1/jobs/${encodeURIComponent(id)}/logs${follow ? '?follow=true' : ''}`,
  );
  if (!res.body) return;
  for await (const chunk of Readable.fromWeb(res.body as never))
    process.stdout.write(chunk as Buffer);
}

export type SubmitFlags = Record<string, string | string[] | boolean | undefined>;

/** Packs a directory, uploads it with a spec built from `o`, and returns the job id. */
export async function submitDirectory(
  client: ApiClient,
  dir: string,
  o: SubmitFlags,
): Promise<string> {
  const root = resolve(dir);
  const info = await stat(root).catch(() => null);
  if (!info?.isDirectory()) throw new CliError(`${dir} is not a directory`);
  const spec = {
    name: (o.name as string | undefined) ?? root.split('/').pop() ?? 'job',
    command: o.command as string,
    ...(o.image ? { image: o.image } : {}),
    ...(o.setup ? { setup: o.setup } : {}),
    resources: {
      gpus: Number(o.gpus ?? 0),
      ...(o.vramGb ? { vramGb: Number(o.vramGb) } : {}),
      ...(o.cpus ? { cpus: Number(o.cpus) } : {}),
      ...(o.memoryGb ? { memoryGb: Number(o.memoryGb) } : {}),
    },
    ...(o.priority ? { priority: Number(o.priority) } : {}),
    ...(o.maxRetries ? { maxRetries: Number(o.maxRetries) } : {}),
    env: parseEnv((o.env as string[]) ?? []),
  };
  const archive = join(tmpdir(), `${newId('code')}.tar.gz`);
  try {
    await pipeline(packDirectory(root), createWriteStream(archive));
    const { size } = await stat(archive);
    const { body, headers } = multipartBody(spec, archive, size);
    const res = await client.request('/v1/jobs', { method: 'POST', body, headers, duplex: 'half' });
    const job = (await res.json()) as { id: string; status: string; seq: number };
    return job.id;
  } finally {
    await rm(archive, { force: true });
  }
}

/**
 * Streams a job's log until the job ends, and returns the job as it ended: the log ends with the
 * job's last event, and the job's view is read once the read model holds that event.
 */
export async function followToEnd(client: ApiClient, id: string): Promise<JobView> {
  await streamLogs(client, id, true);
  const events = await client.json<{ seq: number }[]>(`/v1/jobs/${id}/events`);
  const last = events.at(-1)?.seq ?? 0;
  return client.json<JobView>(`/v1/jobs/${id}?after=${last}`);
}

async function submit(dir: string, o: SubmitFlags, client: ApiClient): Promise<void> {
  const id = await submitDirectory(client, dir, o);
  console.log(id);
  if (!o.follow) return;
  const final = await followToEnd(client, id);
  console.error(
    `job ${final.id} ${final.status}${final.exitCode !== null ? ` (exit ${final.exitCode})` : ''}`,
  );
  if (final.status !== 'succeeded') process.exitCode = 1;
}

/** Submit, list, inspect and cancel jobs. */
export function registerJobCommands(program: Command): void {
  program
    .command('submit')
    .description('package DIR and submit it as a training job')
    .argument('<dir>', 'the code directory to upload')
    .requiredOption('--command <cmd>', 'the command to run in the code directory')
    .option('--name <name>', 'job name (default: the directory name)')
    .option('--gpus <n>', 'GPUs needed (0 = CPU only)', '0')
    .option('--vram-gb <gb>', 'VRAM per GPU, in GiB')
    .option('--cpus <n>', 'CPU slots for a CPU job')
    .option('--memory-gb <gb>', 'host memory, in GiB')
    .option('--image <image>', 'a ready image: skips the build')
    .option('--setup <cmd>', 'a setup command the builder runs once')
    .option('--priority <n>', 'higher runs first')
    .option('--max-retries <n>', 'retries after platform failures')
    .option('--env <NAME=VALUE>', 'an environment variable (repeatable)', collect, [])
    .option('-f, --follow', 'follow the logs until the job ends')
    .action(async (dir: string, o) => submit(dir, o, ApiClient.fromEnv()));

  program
    .command('ls')
    .description('list your jobs, newest first')
    .option('--status <status>', 'only jobs with this status')
    .option('--limit <n>', 'how many', '50')
    .option('--json', 'print JSON')
    .action(async (o: { status?: string; limit: string; json?: boolean }) => {
      const q = new URLSearchParams({ limit: o.limit, ...(o.status && { status: o.status }) });
      const jobs = await ApiClient.fromEnv().json<JobView[]>(`/v1/jobs?${q}`);
      if (o.json) return console.log(JSON.stringify(jobs, null, 2));
      printTable(
        ['ID', 'NAME', 'STATUS', 'GPUS', 'CREATED', 'EXIT'],
        jobs.map((j) => [
          j.id,
          j.name,
          j.status,
          String(j.resources.gpus),
          j.createdAt,
          j.exitCode === null ? '' : String(j.exitCode),
        ]),
      );
    });

  program
    .command('status')
    .description('show a job and its attempts')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const job = await ApiClient.fromEnv().json<JobView>(`/v1/jobs/${encodeURIComponent(id)}`);
      if (o.json) return console.log(JSON.stringify(job, null, 2));
      console.log(
        `${job.id}  ${job.name}  ${job.status}${TERMINAL.has(job.status) && job.exitCode !== null ? ` (exit ${job.exitCode})` : ''}`,
      );
      console.log(
        `owner ${job.owner}  created ${job.createdAt}  started ${job.startedAt ?? '-'}  finished ${job.finishedAt ?? '-'}`,
      );
      if (job.failure)
        console.log(`failure: ${job.failure.kind} ${job.failure.reason}: ${job.failure.message}`);
      printTable(
        ['ATTEMPT', 'WORKER', 'GPUS', 'STATUS', 'EXIT', 'STARTED', 'FINISHED'],
        (job.attempts ?? []).map((a) => [
          String(a.number),
          a.workerId,
          a.gpus.join(',') || 'cpu',
          a.status,
          a.exitCode === null ? '' : String(a.exitCode),
          a.startedAt ?? '',
          a.finishedAt ?? '',
        ]),
      );
    });

  program
    .command('logs')
    .description("print a job's log")
    .argument('<id>')
    .option('-f, --follow', 'stream until the job ends')
    .action(async (id: string, o: { follow?: boolean }) =>
      streamLogs(ApiClient.fromEnv(), id, Boolean(o.follow)),
    );

  program
    .command('outputs')
    .description("list a job's output files, or download them")
    .argument('<id>')
    .option('--download <dir>', 'download every file into DIR')
    .action(async (id: string, o: { download?: string }) => {
      const client = ApiClient.fromEnv();
      const files = await client.json<{ path: string; size: number; sha256: string }[]>(
        `/v1/jobs/${encodeURIComponent(id)}/outputs`,
      );
      if (!o.download) {
        printTable(
          ['PATH', 'SIZE', 'SHA256'],
          files.map((f) => [f.path, String(f.size), f.sha256]),
        );
        return;
      }
      for (const f of files) {
        const target = resolve(o.download, f.path);
        if (!target.startsWith(resolve(o.download)))
          throw new CliError(`refusing to write outside ${o.download}: ${f.path}`);
        await mkdir(dirname(target), { recursive: true });
        const res = await client.request(
          `/v1/jobs/${encodeURIComponent(id)}/outputs/${f.path.split('/').map(encodeURIComponent).join('/')}`,
        );
        await pipeline(Readable.fromWeb(res.body as never), createWriteStream(target));
        console.log(`${f.path} (${f.size} bytes)`);
      }
    });

  program
    .command('cancel')
    .description('cancel a job')
    .argument('<id>')
    .action(async (id: string) => {
      const r = await ApiClient.fromEnv().post<{
        id: string;
        status: string;
        cancelRequested: boolean;
      }>(`/v1/jobs/${encodeURIComponent(id)}/cancel`, {});
      console.log(`${r.id} ${r.status === 'cancelled' ? 'cancelled' : 'cancelling'}`);
    });
}
