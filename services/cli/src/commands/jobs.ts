import { resolve, sep } from 'node:path';
import type { Command } from 'commander';
import { formatDuration } from '@trainyard/events';
import { ApiClient, CliError } from '../client.ts';
import { download } from '../download.ts';
import { exitStatusOf, outcomeLine, printLog } from '../logs.ts';
import { cleanName } from '../output.ts';
import { callerRole, type JobView } from '../views.ts';
import { wholeNumber } from './flags.ts';
import { registerSubmitCommand } from './submit.ts';
import { bytes, printJson, printTable } from './table.ts';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** A service: its health check, and its ports while it runs. */
function serviceLine(job: JobView): string {
  const ports = job.status === 'running' ? job.attempts?.at(-1)?.ports : undefined;
  const health = job.health?.http
    ? `health GET ${job.health.http}`
    : job.health?.command
      ? `health \`${cleanName(job.health.command)}\``
      : 'no health check';
  const reach = ports?.length
    ? `, on port${ports.length > 1 ? 's' : ''} ${ports.join(', ')}: \`trainyard service open ${job.id}\``
    : '';
  return `service (runs until stopped; ${health})${reach}`;
}

/** An array job's shards: how many, how they stand, and how to name one. */
function shardsLine(id: string, count: number, statuses: Record<string, number>): string {
  const stand = Object.entries(statuses)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, n]) => `${n} ${status}`)
    .join(', ');
  const last = count > 1 ? ` … ${id}_${count - 1}` : '';
  return `array job of ${count} shards (${id}_0${last})${stand ? `: ${stand}` : ''}`;
}

/** What a job's probe measured, on one line. */
function estimateLine(e: NonNullable<JobView['estimate']>): string {
  const vram = e.device === 'cuda' ? `${bytes(e.vramBytes)} GPU memory, ` : '';
  const step = e.stepMs === null ? '' : `, ${e.stepMs.toFixed(1)} ms a step`;
  return `measured ${vram}${bytes(e.ramBytes)} RAM over ${e.steps} steps on ${e.device}${step}`;
}

/** Pages through `GET /v1/jobs` until `want` jobs (or all of them) are in. */
async function listJobs(
  client: ApiClient,
  q: { status?: string; owner?: string },
  want: number,
): Promise<JobView[]> {
  const jobs: JobView[] = [];
  let cursor: string | null = null;
  do {
    const page = new URLSearchParams({
      limit: String(Math.min(500, want - jobs.length)),
      ...(q.status && { status: q.status }),
      ...(q.owner && { owner: q.owner }),
      ...(cursor && { cursor }),
    });
    const res = await client.request(`/v1/jobs?${page}`);
    jobs.push(...((await res.json()) as JobView[]));
    cursor = res.headers.get('x-next-cursor');
  } while (cursor && jobs.length < want);
  return jobs;
}

/** Submit, list, inspect, follow, hold and cancel jobs. */
export function registerJobCommands(program: Command): void {
  registerSubmitCommand(program);

  program
    .command('ls')
    .description('list jobs, newest first (admins see everyone’s)')
    .option('--status <status>', 'only jobs with this status')
    .option('--owner <user>', "admins: only this user's jobs")
    .option('--limit <n>', 'how many', '50')
    .option('--all', 'every job, page by page')
    .option('--json', 'print JSON')
    .action(
      async (o: {
        status?: string;
        owner?: string;
        limit: string;
        all?: boolean;
        json?: boolean;
      }) => {
        const want = o.all ? Infinity : (wholeNumber('--limit', o.limit) ?? 50);
        if (want < 1) throw new CliError('--limit wants a number of 1 or more');
        const client = ApiClient.fromEnv();
        const jobs = await listJobs(client, o, want);
        if (o.json) return printJson(jobs);
        const admin = callerRole(client.token) === 'admin';
        printTable(
          ['ID', ...(admin ? ['OWNER'] : []), 'NAME', 'STATUS', 'GPUS', 'CREATED', 'EXIT'],
          jobs.map((j) => [
            j.id,
            ...(admin ? [j.owner] : []),
            j.name,
            j.held ? `${j.status} (held)` : j.status,
            String(j.resources.gpus),
            j.createdAt,
            j.exitCode === null ? '' : String(j.exitCode),
          ]),
        );
      },
    );

  program
    .command('status')
    .description('show a job and its attempts')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const job = await ApiClient.fromEnv().json<JobView>(`/v1/jobs/${encodeURIComponent(id)}`);
      if (o.json) return printJson(job);
      console.log(
        `${job.id}  ${cleanName(job.name)}  ${job.status}${TERMINAL.has(job.status) && job.exitCode !== null ? ` (exit ${job.exitCode})` : ''}`,
      );
      console.log(
        `owner ${job.owner}  created ${job.createdAt}  started ${job.startedAt ?? '-'}  finished ${job.finishedAt ?? '-'}`,
      );
      if (job.image) console.log(`image ${job.image}  built ${job.imageDigest ?? '(not yet)'}`);
      if (job.timeLimit) console.log(`time limit ${formatDuration(job.timeLimit)} an attempt`);
      if (job.preemptible) console.log('preemptible: work of a higher priority may stop it');
      if (job.shards) console.log(shardsLine(job.id, job.shards, job.shardStatuses ?? {}));
      if (job.shardOf) console.log(`shard ${job.shardOf.index} of array job ${job.shardOf.jobId}`);
      if (job.kind === 'service') console.log(serviceLine(job));
      if (job.nodes && job.nodes > 1)
        console.log(`gang job on ${job.nodes} workers at once (rank 0 first in WORKER)`);
      if (job.dependsOn?.length)
        console.log(
          `after ${job.dependsOn.join(', ')}${job.dependenciesMet ? '' : ' (waiting for them)'}`,
        );
      if (job.estimate) console.log(estimateLine(job.estimate));
      if (job.team) console.log(`charged to team ${job.team}`);
      if (job.held && !job.pendingMessage) {
        const why = job.held.reason ? ` (${cleanName(job.held.reason)})` : '';
        console.log(
          job.held.by === 'admin'
            ? `held by an admin${why}: only an admin may release it`
            : `held by its owner${why}: \`trainyard release ${job.id}\` lets it queue`,
        );
      }
      if (job.pendingMessage)
        console.log(
          `waiting${job.queuePosition ? ` (#${job.queuePosition} in the queue)` : ''}: ${cleanName(job.pendingMessage)}`,
        );
      if (job.failure)
        console.log(
          `failure: ${job.failure.kind} ${job.failure.reason}: ${cleanName(job.failure.message)}`,
        );
      // An array job runs nothing itself: its shards' attempts are theirs.
      if (job.shards && !job.attempts?.length) return;
      printTable(
        ['ATTEMPT', 'WORKER', 'GPUS', 'STATUS', 'EXIT', 'STARTED', 'FINISHED'],
        (job.attempts ?? []).map((a) => [
          a.probe ? `${a.number} (probe)` : String(a.number),
          [a.workerId, ...(a.members ?? []).map((m) => m.workerId)].join(','),
          [a.gpus, ...(a.members ?? []).map((m) => m.gpus)]
            .map((gpus) => gpus.join(',') || 'cpu')
            .join(' '),
          a.status,
          a.exitCode === null ? '' : String(a.exitCode),
          a.startedAt ?? '',
          a.finishedAt ?? '',
        ]),
      );
    });

  program
    .command('logs')
    .description("print a job's log, a header line before each attempt")
    .argument('<id>')
    .option('-f, --follow', "stream until the job ends; exit with the job's outcome")
    .option('-n, --tail <lines>', 'only the last N lines (then follow on, with -f)')
    .option('--json', 'one JSON object a line: attempt, log and end events')
    .option('--raw', "print the job's escape sequences and control characters as they are")
    .option('--rank <n>', "a gang job's member of rank N (1 and on): its own log")
    .action(
      async (
        id: string,
        o: { follow?: boolean; tail?: string; json?: boolean; raw?: boolean; rank?: string },
      ) => {
        const tail = wholeNumber('--tail', o.tail);
        if (tail !== undefined && (tail < 0 || !Number.isInteger(tail)))
          throw new CliError('--tail wants a whole number of lines');
        const rank = wholeNumber('--rank', o.rank);
        if (rank !== undefined && (rank < 1 || !Number.isInteger(rank)))
          throw new CliError('--rank wants a whole number from 1 (rank 0 is the job’s own log)');
        const client = ApiClient.fromEnv();
        const end = await printLog(client, id, {
          follow: Boolean(o.follow),
          json: Boolean(o.json),
          raw: Boolean(o.raw),
          ...(tail !== undefined && { tail }),
          ...(rank !== undefined && { rank }),
        });
        if (o.follow) {
          if (!o.json) console.error(outcomeLine(id, end));
          process.exitCode = exitStatusOf(end);
        }
      },
    );

  program
    .command('outputs')
    .description("list a job's output files, or download them (each checked against its sha256)")
    .argument('<id>')
    .option('--download <dir>', 'download every file into DIR')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { download?: string; json?: boolean }) => {
      const client = ApiClient.fromEnv();
      const files = await client.json<{ path: string; size: number; sha256: string }[]>(
        `/v1/jobs/${encodeURIComponent(id)}/outputs`,
      );
      if (!o.download) {
        if (o.json) return printJson(files);
        return printTable(
          ['PATH', 'SIZE', 'SHA256'],
          files.map((f) => [f.path, String(f.size), f.sha256]),
        );
      }
      const into = resolve(o.download);
      for (const f of files) {
        const target = resolve(into, f.path);
        if (!target.startsWith(into + sep))
          throw new CliError(`refusing to write outside ${o.download}: ${cleanName(f.path)}`);
        const res = await client.request(
          `/v1/jobs/${encodeURIComponent(id)}/outputs/${f.path.split('/').map(encodeURIComponent).join('/')}`,
        );
        await download(res, target, f.sha256);
        if (!o.json) console.log(`${cleanName(f.path)} (${bytes(f.size)}, sha256 ok)`);
      }
      if (o.json) printJson(files.map((f) => ({ ...f, file: resolve(into, f.path) })));
    });

  program
    .command('priority')
    .description('change a job’s priority while it waits or runs (above 0 needs an admin)')
    .argument('<id>')
    .argument('<priority>', 'from -1000 to 1000')
    .option('--json', 'print JSON')
    .action(async (id: string, value: string, o: { json?: boolean }) => {
      // A fraction is the API's to refuse, with the range, as for a spec.
      const priority = wholeNumber('<priority>', value)!;
      const r = await ApiClient.fromEnv().patch<{ id: string; status: string; priority: number }>(
        `/v1/jobs/${encodeURIComponent(id)}`,
        { priority },
      );
      if (o.json) return printJson(r);
      console.log(`${r.id} priority ${r.priority} (${r.status})`);
    });

  program
    .command('cancel')
    .description('cancel a job')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().post<{
        id: string;
        status: string;
        cancelRequested: boolean;
      }>(`/v1/jobs/${encodeURIComponent(id)}/cancel`, {});
      if (o.json) return printJson(r);
      console.log(`${r.id} ${r.status === 'cancelled' ? 'cancelled' : 'cancelling'}`);
    });

  program
    .command('hold')
    .description('keep a waiting job from starting until it is released')
    .argument('<id>')
    .option('--reason <text>', 'why, shown with the job')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { reason?: string; json?: boolean }) => {
      const r = await ApiClient.fromEnv().post<HoldAnswer>(
        `/v1/jobs/${encodeURIComponent(id)}/hold`,
        o.reason === undefined ? {} : { reason: o.reason },
      );
      if (o.json) return printJson(r);
      console.log(
        `${r.id} held by ${r.held?.by === 'admin' ? 'an admin' : 'its owner'} (${r.status})`,
      );
    });

  program
    .command('release')
    .description('let a held job queue again')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().post<HoldAnswer>(
        `/v1/jobs/${encodeURIComponent(id)}/release`,
        {},
      );
      if (o.json) return printJson(r);
      console.log(`${r.id} released (${r.status})`);
    });
}

interface HoldAnswer {
  id: string;
  status: string;
  held: JobView['held'];
}
