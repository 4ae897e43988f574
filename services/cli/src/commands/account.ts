import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { profileName, readCredentials, removeCredentials, writeCredentials } from '../config.ts';
import { quotaBody, quotaSetLine } from './flags.ts';
import { printJson, printTable } from './table.ts';

/** One GPU's memory and utilisation at its worker's last heartbeat: `0: 12.3/80 GiB 35%`. */
function gpuUse(g: {
  index: number;
  vramBytes: number;
  usedBytes: number | null;
  utilPct: number | null;
}): string {
  if (g.usedBytes === null) return `${g.index}: ?`;
  const gib = (b: number) => (b / 1024 ** 3).toFixed(1).replace(/\.0$/, '');
  return `${g.index}: ${gib(g.usedBytes)}/${gib(g.vramBytes)} GiB ${Math.round(g.utilPct ?? 0)}%`;
}

/** A worker's GPUs by model and size, in index order: `1x NVIDIA L4 (24 GiB), 1x ...`. */
function gpuModels(gpus: { name: string; vramBytes: number }[]): string {
  const counts = new Map<string, number>();
  for (const g of gpus) {
    const model = `${g.name} (${(g.vramBytes / 1024 ** 3).toFixed(0)} GiB)`;
    counts.set(model, (counts.get(model) ?? 0) + 1);
  }
  return [...counts].map(([model, n]) => `${n}x ${model}`).join(', ');
}

/** Asks for a line on the terminal; a secret is read without echoing it. */
async function prompt(question: string, what: string, hidden = false): Promise<string> {
  if (!process.stdin.isTTY) throw new CliError(`${what} is required: ${HOW_TO_GIVE[what]}`);
  if (!hidden) {
    const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
    try {
      return (await rl.question(question)).trim();
    } finally {
      rl.close();
    }
  }
  return readSecret(question);
}

const HOW_TO_GIVE: Record<string, string> = {
  'the username': 'pass -u NAME',
  'the password': 'pass -p PASSWORD, or set TRAINYARD_PASSWORD',
  'a password for the new user': 'pass -p PASSWORD',
};

/** Reads a line from the terminal in raw mode, echoing nothing; Ctrl-C gives up. */
function readSecret(question: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.resume();
  return new Promise((resolve, reject) => {
    let typed = '';
    const done = (err: Error | null) => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      if (err) reject(err);
      else resolve(typed);
    };
    const onData = (chunk: Buffer) => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\r' || ch === '\n') return done(null);
        if (ch === '\u0003' || ch === '\u0004')
          return done(new CliError('cancelled', 'CANCELLED', 130));
        if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
        else if (ch >= ' ') typed += ch;
      }
    };
    stdin.on('data', onData);
  });
}

/** Login, logout, users and workers. */
export function registerAccountCommands(program: Command): void {
  program
    .command('login')
    .description('log in and save a token for the other commands (per --profile)')
    .option('-u, --username <name>', 'username')
    .option(
      '-p, --password <password>',
      'password (default: prompt, or TRAINYARD_PASSWORD); other processes can read a command line',
    )
    .action(async (o: { username?: string; password?: string }) => {
      const url = ApiClient.fromEnv().baseUrl;
      const username = o.username ?? (await prompt('username: ', 'the username'));
      const password =
        o.password ||
        process.env.TRAINYARD_PASSWORD ||
        (await prompt('password: ', 'the password', true));
      const client = new ApiClient(url, null);
      const { token, refreshToken, role, expiresAt } = await client.post<{
        token: string;
        refreshToken: string;
        role: string;
        expiresAt: string;
      }>('/v1/auth/login', { username, password });
      await writeCredentials({ apiUrl: url, token, refreshToken, username, expiresAt });
      const profile = profileName();
      console.log(
        `logged in to ${url} as ${username} (${role})${profile === 'default' ? '' : ` in profile ${profile}`}`,
      );
    });

  program
    .command('logout')
    .description("end this profile's login at the server, and forget it here")
    .action(async () => {
      const saved = readCredentials();
      const profile = profileName();
      if (!saved) {
        console.log(`not logged in${profile === 'default' ? '' : ` in profile ${profile}`}`);
        return;
      }
      const client = new ApiClient(saved.apiUrl, saved.token, { kind: 'saved', creds: saved });
      const ended = await client
        .request('/v1/auth/logout', { method: 'POST' })
        .then(() => true)
        .catch((err: unknown) => {
          if (err instanceof CliError && /TOKEN_(EXPIRED|REVOKED)|UNAUTHENTICATED/.test(err.code))
            return true;
          console.error(
            `warning: could not end the session at ${saved.apiUrl} (${(err as Error).message}); forgetting it here`,
          );
          return false;
        });
      await removeCredentials();
      console.log(
        `logged out of ${saved.apiUrl} (${saved.username})${ended ? '' : ', on this machine only'}`,
      );
    });

  const users = program.command('users').description('manage users (admins)');
  users
    .command('create')
    .argument('<username>')
    .option('--role <role>', 'user or admin', 'user')
    .option('-p, --password <password>', 'password (default: prompt)')
    .option('--json', 'print JSON')
    .action(async (username: string, o: { role: string; password?: string; json?: boolean }) => {
      const password =
        o.password ??
        (await prompt('password for the new user: ', 'a password for the new user', true));
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
      const list = await ApiClient.fromEnv().json<
        {
          username: string;
          role: string;
          createdAt: string;
          maxGpus: number | null;
          maxGpuHours?: number | null;
        }[]
      >('/v1/users');
      if (o.json) return printJson(list);
      printTable(
        ['USER', 'ROLE', 'CREATED', 'MAX GPUS', 'GPU-H/MONTH'],
        list.map((u) => [
          u.username,
          u.role,
          u.createdAt,
          u.maxGpus == null ? '-' : String(u.maxGpus),
          u.maxGpuHours == null ? '-' : String(u.maxGpuHours),
        ]),
      );
    });
  users
    .command('quota')
    .description(
      'the GPUs a user’s jobs and sessions may hold at once, or take a month; more waits, queued',
    )
    .argument('<username>')
    .option('--max-gpus <n>', 'a number of GPUs at once, or "none" to lift that quota')
    .option('--max-gpu-hours <h>', 'GPU-hours a calendar month (UTC), or "none"')
    .option('--json', 'print JSON')
    .action(
      async (username: string, o: { maxGpus?: string; maxGpuHours?: string; json?: boolean }) => {
        const r = await ApiClient.fromEnv().put<{
          username: string;
          maxGpus?: number | null;
          maxGpuHours?: number | null;
        }>(`/v1/users/${encodeURIComponent(username)}/quota`, quotaBody(o));
        if (o.json) return printJson(r);
        console.log(quotaSetLine(r.username, r));
      },
    );

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
          gpus: {
            index: number;
            name: string;
            vramBytes: number;
            usedBytes: number | null;
            utilPct: number | null;
          }[];
          lastHeartbeatAt: string | null;
        }[]
      >('/v1/workers');
      if (o.json) return printJson(workers);
      printTable(
        ['WORKER', 'STATUS', 'GPUS', 'GPU USE', 'CPU SLOTS', 'LAST HEARTBEAT'],
        workers.map((w) => [
          w.id,
          w.status,
          w.gpus.length ? `${gpuModels(w.gpus)}${w.simulated ? ' [simulated]' : ''}` : '-',
          w.gpus.map(gpuUse).join('  ') || '-',
          String(w.cpuSlots),
          w.lastHeartbeatAt ?? '-',
        ]),
      );
    });
}
