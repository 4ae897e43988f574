import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { apiUrl, writeCredentials } from '../config.ts';
import { printTable } from './table.ts';

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

/** Login, users and workers. */
export function registerAccountCommands(program: Command): void {
  program
    .command('login')
    .description('log in and save a token for the other commands')
    .option('--api <url>', 'the API address')
    .option('-u, --username <name>', 'username')
    .option('-p, --password <password>', 'password (default: prompt, or TRAINYARD_PASSWORD)')
    .action(async (o: { api?: string; username?: string; password?: string }) => {
      const url = apiUrl(o.api);
      const username = o.username ?? (await prompt('username: '));
      const password =
        o.password ?? process.env.TRAINYARD_PASSWORD ?? (await prompt('password: ', true));
      const client = new ApiClient(url, null);
      const { token } = await client.post<{ token: string }>('/v1/auth/login', {
        username,
        password,
      });
      await writeCredentials({ apiUrl: url, token, username });
      console.log(`logged in to ${url} as ${username}`);
    });

  const users = program.command('users').description('manage users (admins)');
  users
    .command('create')
    .argument('<username>')
    .option('--role <role>', 'user or admin', 'user')
    .option('-p, --password <password>', 'password (default: prompt)')
    .action(async (username: string, o: { role: string; password?: string }) => {
      const password = o.password ?? (await prompt('password for the new user: ', true));
      const r = await ApiClient.fromEnv().post<{ username: string; role: string }>('/v1/users', {
        username,
        password,
        role: o.role,
      });
      console.log(`created ${r.username} (${r.role})`);
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
      if (o.json) return console.log(JSON.stringify(workers, null, 2));
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
