import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { apiUrl, profileName, removeCredentials, writeCredentials } from '../config.ts';
import { printJson, printTable } from './table.ts';

async function prompt(question: string, hidden = false): Promise<string> {
  if (!process.stdin.isTTY)
    throw new CliError(`${question.trim()} is required (pass it as an option)`);
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  if (hidden) {
    const out = rl as unknown as { _writeToOutput: (s: string) => void };
    out._writeToOutput = (s: string) => {
      if (s.includes(question)) process.stderr.write(s);
    };
  }
  try {
    return (await rl.question(question)).trim();
  } finally {
    rl.close();
    if (hidden) process.stderr.write('\n');
  }
}

/** Login, logout, users and workers. */
export function registerAccountCommands(program: Command): void {
  program
    .command('login')
    .description('log in and save a token for the other commands (per --profile)')
    .option('-u, --username <name>', 'username')
    .option('-p, --password <password>', 'password (default: prompt, or TRAINYARD_PASSWORD)')
    .action(async (o: { username?: string; password?: string }) => {
      const url = apiUrl();
      const username = o.username ?? (await prompt('username: '));
      const password =
        o.password ?? process.env.TRAINYARD_PASSWORD ?? (await prompt('password: ', true));
      const client = new ApiClient(url, null);
      const { token, role, expiresAt } = await client.post<{
        token: string;
        role: string;
        expiresAt: string;
      }>('/v1/auth/login', { username, password });
      await writeCredentials({ apiUrl: url, token, username, expiresAt });
      const profile = profileName();
      console.log(
        `logged in to ${url} as ${username} (${role})${profile === 'default' ? '' : ` in profile ${profile}`}, until ${expiresAt}`,
      );
    });

  program
    .command('logout')
    .description("forget this profile's saved login")
    .action(async () => {
      const had = await removeCredentials();
      const profile = profileName();
      if (!had)
        console.log(`not logged in${profile === 'default' ? '' : ` in profile ${profile}`}`);
      else console.log(`logged out of ${had.apiUrl} (${had.username})`);
    });

  const users = program.command('users').description('manage users (admins)');
  users
    .command('create')
    .argument('<username>')
    .option('--role <role>', 'user or admin', 'user')
    .option('-p, --password <password>', 'password (default: prompt)')
    .option('--json', 'print JSON')
    .action(async (username: string, o: { role: string; password?: string; json?: boolean }) => {
      const password = o.password ?? (await prompt('password for the new user: ', true));
      const r = await ApiClient.fromEnv().post<{ username: string; role: string }>('/v1/users', {
        username,
        password,
        role: o.role,
      });
      if (o.json) return printJson(r);
      console.log(`created ${r.username} (${r.role})`);
    });
  users
    .command('ls')
    .description('list users')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const list =
        await ApiClient.fromEnv().json<{ username: string; role: string; createdAt: string }[]>(
          '/v1/users',
        );
      if (o.json) return printJson(list);
      printTable(
        ['USER', 'ROLE', 'CREATED'],
        list.map((u) => [u.username, u.role, u.createdAt]),
      );
    });

  program
    .command('workers')
    .description('list workers and their GPUs')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const workers = await ApiClient.fromEnv().json<
        {
          id: string;
          status: string;
          simulated: boolean;
          cpuSlots: number;
          gpus: { index: number; name: string; vramBytes: number }[];
          lastHeartbeatAt: string | null;
        }[]
      >('/v1/workers');
      if (o.json) return printJson(workers);
      printTable(
        ['WORKER', 'STATUS', 'GPUS', 'CPU SLOTS', 'LAST HEARTBEAT'],
        workers.map((w) => [
          w.id,
          w.status,
          w.gpus.length
            ? `${w.gpus.length}x ${w.gpus[0]!.name} (${(w.gpus[0]!.vramBytes / 1024 ** 3).toFixed(0)} GiB)${w.simulated ? ' [simulated]' : ''}`
            : '-',
          String(w.cpuSlots),
          w.lastHeartbeatAt ?? '-',
        ]),
      );
    });
}
