import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { quotaBody, quotaSetLine } from './flags.ts';
import { printJson, printTable } from './table.ts';

interface TeamView {
  name: string;
  createdAt: string;
  maxGpus: number | null;
  maxGpuHours?: number | null;
  members: { username: string; role: string; since: string }[];
}

const path = (team: string, username?: string) =>
  `/v1/teams/${encodeURIComponent(team)}${username === undefined ? '' : `/members/${encodeURIComponent(username)}`}`;

/** `trainyard teams`: groups of users that share a GPU quota. */
export function registerTeamCommands(program: Command): void {
  const teams = program
    .command('teams')
    .description(
      'teams: users that share a GPU quota (admins make and staff them; leads see their queue)',
    );
  teams
    .command('create')
    .description('make a team (admins)')
    .argument('<name>')
    .option('--json', 'print JSON')
    .action(async (name: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().post<{ name: string }>('/v1/teams', { name });
      if (o.json) return printJson(r);
      console.log(`created team ${r.name}`);
    });
  teams
    .command('ls')
    .description('the teams you are in, with their members (admins: every team)')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const list = await ApiClient.fromEnv().json<TeamView[]>('/v1/teams');
      if (o.json) return printJson(list);
      printTable(
        ['TEAM', 'MAX GPUS', 'GPU-H/MONTH', 'MEMBERS'],
        list.map((t) => [
          t.name,
          t.maxGpus === null ? '-' : String(t.maxGpus),
          t.maxGpuHours == null ? '-' : String(t.maxGpuHours),
          t.members
            .map((m) => (m.role === 'lead' ? `${m.username} (lead)` : m.username))
            .join(', '),
        ]),
      );
    });
  teams
    .command('add')
    .description('add a user to a team, or change their role (admins)')
    .argument('<team>')
    .argument('<username>')
    .option('--lead', 'make them a lead: they see what is charged to the team (queue --team)')
    .option('--member', 'make a lead a plain member again')
    .option('--json', 'print JSON')
    .action(
      async (
        team: string,
        username: string,
        o: { lead?: boolean; member?: boolean; json?: boolean },
      ) => {
        if (o.lead && o.member) throw new CliError('--lead or --member: one, not both');
        const r = await ApiClient.fromEnv().put<{ team: string; username: string; role: string }>(
          path(team, username),
          o.lead ? { role: 'lead' } : o.member ? { role: 'member' } : {},
        );
        if (o.json) return printJson(r);
        console.log(`${r.username} is a ${r.role} of ${r.team}`);
      },
    );
  teams
    .command('remove')
    .description('take a user out of a team (admins)')
    .argument('<team>')
    .argument('<username>')
    .option('--json', 'print JSON')
    .action(async (team: string, username: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().json<{ team: string; username: string }>(
        path(team, username),
        { method: 'DELETE' },
      );
      if (o.json) return printJson(r);
      console.log(`${r.username} is not in ${r.team}`);
    });
  teams
    .command('quota')
    .description(
      'the GPUs the team’s work may hold at once, or take a month (admins); more waits, queued',
    )
    .argument('<team>')
    .option('--max-gpus <n>', 'a number of GPUs at once, or "none" to lift that quota')
    .option('--max-gpu-hours <h>', 'GPU-hours a calendar month (UTC), or "none"')
    .option('--json', 'print JSON')
    .action(async (team: string, o: { maxGpus?: string; maxGpuHours?: string; json?: boolean }) => {
      const r = await ApiClient.fromEnv().put<{
        name: string;
        maxGpus?: number | null;
        maxGpuHours?: number | null;
      }>(`${path(team)}/quota`, quotaBody(o));
      if (o.json) return printJson(r);
      console.log(quotaSetLine(r.name, r));
    });
}
