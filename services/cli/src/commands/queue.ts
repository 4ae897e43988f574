import type { Command } from 'commander';
import type { Holder, QueueEntry, QueueReply, TeamHolding } from '@trainyard/events';
import { ApiClient, CliError } from '../client.ts';
import { cleanName } from '../output.ts';
import { wholeNumber } from './flags.ts';
import { printJson, printTable } from './table.ts';

/** What an entry asks for, short: `2 GPU x 20 GiB`, `1 GPU whole`, `cpu 2`. */
function asks(e: QueueEntry): string {
  const { gpus, vramGb, cpus } = e.resources;
  if (gpus === 0) return `cpu ${cpus ?? 1}`;
  return `${gpus} GPU ${vramGb === undefined ? 'whole' : `x ${vramGb} GiB`}`;
}

/** A time to the minute, in UTC: `2026-12-06 14:30Z`. */
const shortTime = (iso: string) => `${iso.slice(0, 16).replace('T', ' ')}Z`;

const quotaOf = (h: Holder) => (h.maxGpus == null ? '-' : String(h.maxGpus));

function printHolders(holders: Holder[]): void {
  console.log('\nholding now:');
  printTable(
    ['USER', 'GPUS', 'QUOTA', 'GPU-H', 'GPU-H QUOTA', 'CPUS', 'JOBS', 'SESSIONS'],
    holders.map((h) => [
      h.owner,
      String(h.gpus),
      quotaOf(h),
      String(h.gpuHours ?? '-'),
      h.maxGpuHours == null ? '-' : String(h.maxGpuHours),
      String(h.cpus),
      String(h.jobs),
      String(h.sessions),
    ]),
  );
}

function printTeams(teams: TeamHolding[]): void {
  console.log('\nteams holding now:');
  printTable(
    ['TEAM', 'GPUS', 'QUOTA', 'GPU-H', 'GPU-H QUOTA'],
    teams.map((t) => [
      t.team,
      String(t.gpus),
      t.maxGpus === null ? '-' : String(t.maxGpus),
      String(t.gpuHours),
      t.maxGpuHours === null ? '-' : String(t.maxGpuHours),
    ]),
  );
}

/** What the caller's running work holds, against their quota, in a line. */
function holdingLine(h: Holder): string {
  const gpus = `${h.gpus} GPU${h.gpus === 1 ? '' : 's'}`;
  const work = `${h.jobs} job${h.jobs === 1 ? '' : 's'} and ${h.sessions} session${h.sessions === 1 ? '' : 's'}`;
  const quota = h.maxGpus == null ? 'no GPU quota' : `of your quota of ${h.maxGpus} at once`;
  const hours =
    h.maxGpuHours == null
      ? ''
      : `; your work took ${h.gpuHours ?? 0} of your ${h.maxGpuHours} GPU-hours this month`;
  return `you hold ${gpus} (${quota}) in ${work}${hours}`;
}

/** The queue in placement order, and why a job waits. */
export function registerQueueCommands(program: Command): void {
  program
    .command('queue')
    .description(
      'what waits, in the order the scheduler places it, and why (yours; --all: everyone’s)',
    )
    .option('--all', 'admins: every user’s, and what each user and team holds now')
    .option('--team <name>', 'admins and the team’s leads: what is charged to the team')
    .option('--limit <n>', 'how many', '100')
    .option('--json', 'print JSON')
    .action(async (o: { all?: boolean; team?: string; limit: string; json?: boolean }) => {
      const limit = wholeNumber('--limit', o.limit) ?? 100;
      if (limit < 1 || limit > 1000) throw new CliError('--limit wants a number from 1 to 1000');
      const scope = o.all ? '&all=true' : o.team ? `&team=${encodeURIComponent(o.team)}` : '';
      const q = await ApiClient.fromEnv().json<QueueReply>(`/v1/queue?limit=${limit}${scope}`);
      const others = Boolean(o.all || o.team);
      if (o.json) return printJson(q);
      if (q.entries.length === 0) console.log(o.all ? 'nothing waits' : 'nothing of yours waits');
      else
        printTable(
          ['POS', 'ID', ...(others ? ['OWNER'] : []), 'STATUS', 'PRIO', 'ASKS', 'REASON'],
          q.entries.map((e) => [
            e.position === null ? '-' : String(e.position),
            e.id,
            ...(others ? [e.owner] : []),
            e.status,
            e.effectivePriority === e.priority
              ? String(e.priority)
              : `${e.effectivePriority} (${e.priority})`,
            asks(e),
            e.expectedStart ? `${e.reason}, starts by ${shortTime(e.expectedStart)}` : e.reason,
          ]),
        );
      console.log(`${q.total} waiting in all`);
      if (q.holders?.length && o.all) printHolders(q.holders);
      else if (q.holders?.length === 1) console.log(holdingLine(q.holders[0]!));
      if (q.teams?.length && others) printTeams(q.teams);
    });

  program
    .command('why')
    .description('why a job waits, as the scheduler sees it now')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const why = await ApiClient.fromEnv().json<{ message: string; entry: QueueEntry | null }>(
        `/v1/jobs/${encodeURIComponent(id)}/explain`,
      );
      if (o.json) return printJson(why);
      console.log(`${id}: ${cleanName(why.message)}`);
      if (why.entry && why.entry.effectivePriority !== why.entry.priority)
        console.log(
          `priority ${why.entry.priority}, ${why.entry.effectivePriority} with its wait (since ${why.entry.since})`,
        );
    });
}
