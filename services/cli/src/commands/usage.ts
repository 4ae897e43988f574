import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { cleanName } from '../output.ts';
import { printJson, printTable } from './table.ts';

interface Usage {
  from: string;
  to: string;
  users: { user: string; gpuHours: number; jobs: number; attempts: number }[];
  jobs: { id: string; name: string; owner: string; gpuHours: number; attempts: number }[];
}

/** A day (`2026-11-01`) or a time, as the API takes it. */
function timeFlag(flag: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const at = new Date(/^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T00:00:00Z` : value);
  if (Number.isNaN(at.getTime()))
    throw new CliError(`${flag} wants a day (2026-11-01) or a time, not "${value}"`);
  return at.toISOString();
}

/** `trainyard usage`: GPU-hours held, like `sacct`. */
export function registerUsageCommands(program: Command): void {
  program
    .command('usage')
    .description('GPU-hours held per user and per job (your own; admins: everyone’s)')
    .option('--from <day>', 'the start of the window (default: 30 days ago)')
    .option('--to <day>', 'the end of the window (default: now)')
    .option('--user <name>', 'admins: one user')
    .option('--json', 'print JSON')
    .action(async (o: { from?: string; to?: string; user?: string; json?: boolean }) => {
      const query = new URLSearchParams();
      const from = timeFlag('--from', o.from);
      const to = timeFlag('--to', o.to);
      if (from) query.set('from', from);
      if (to) query.set('to', to);
      if (o.user) query.set('user', o.user);
      const usage = await ApiClient.fromEnv().json<Usage>(`/v1/usage?${query}`);
      if (o.json) return printJson(usage);
      console.log(`GPU-hours from ${usage.from} to ${usage.to}`);
      printTable(
        ['USER', 'GPU-HOURS', 'JOBS', 'ATTEMPTS'],
        usage.users.map((u) => [u.user, u.gpuHours.toFixed(3), String(u.jobs), String(u.attempts)]),
      );
      if (usage.jobs.length === 0) return;
      console.log('');
      printTable(
        ['JOB', 'NAME', 'USER', 'GPU-HOURS', 'ATTEMPTS'],
        usage.jobs.map((j) => [
          j.id,
          cleanName(j.name),
          j.owner,
          j.gpuHours.toFixed(3),
          String(j.attempts),
        ]),
      );
    });
}
