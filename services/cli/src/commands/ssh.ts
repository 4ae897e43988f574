import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { writePrivate } from '../config.ts';
import {
  askpassAnswer,
  knownHostsFile,
  pinHostKey,
  runSsh,
  sshConfigFile,
  sshConfigText,
  type GatewayInfo,
} from '../ssh.ts';
import type { SessionConnect, SessionView } from '../views.ts';

/**
 * Asks for a one-time password for a session, or for a shell beside a job (an id `job_…`); one
 * that is not running is told in words.
 */
export async function connect(client: ApiClient, id: string): Promise<SessionConnect> {
  const job = id.startsWith('job_');
  const path = `/v1/${job ? 'jobs' : 'sessions'}/${encodeURIComponent(id)}/connect`;
  try {
    return await client.post<SessionConnect>(path, {});
  } catch (err) {
    if (err instanceof CliError && err.code === 'INVALID_TRANSITION') {
      const show = job ? `trainyard status ${id}` : `trainyard session show ${id}`;
      throw new CliError(
        `${err.message.replace(/ \(INVALID_TRANSITION\)$/, '')} (see \`${show}\`)`,
        err.code,
      );
    }
    throw err;
  }
}

/** `trainyard ssh`, `trainyard ssh-config`, and the hidden `askpass` that `ssh` runs. */
export function registerSshCommands(program: Command): void {
  program
    .command('ssh')
    .description(
      'open a shell in a running session, or beside a running job (or run CMD there), with the system ssh: your registered key, else a one-time password',
    )
    .argument('<id>', 'the session, or a job (job_…): a shell beside it, as it runs')
    .argument('[cmd...]', 'a command to run instead of a shell, after --')
    .action(async (id: string, cmd: string[]) => {
      const info = await connect(ApiClient.fromEnv(), id);
      process.exitCode = await runSsh({
        gateway: info,
        username: info.username,
        password: info.password,
        command: cmd,
      });
    });

  program
    .command('askpass', { hidden: true })
    .description('print the one-time password for ssh (SSH_ASKPASS)')
    .argument('[prompt...]')
    .action((prompt: string[]) => {
      const answer = askpassAnswer(prompt.join(' '));
      if (answer === null) {
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${answer}\n`);
    });

  program
    .command('ssh-config')
    .description(
      `Host entries for your running sessions (by name and by id), for ssh, scp and VS Code Remote-SSH with a registered key; --write puts them in ${sshConfigFile().replace(process.env.HOME ?? '\0', '~')}`,
    )
    .option('--write', 'write them to the file, for `Include` in ~/.ssh/config')
    .action(async (o: { write?: boolean }) => {
      const client = ApiClient.fromEnv();
      const gateway = await client.json<GatewayInfo>('/v1/ssh-gateway');
      const running = await client.json<SessionView[]>('/v1/sessions?status=running');
      const known = await pinHostKey(gateway);
      const text = sshConfigText(
        running.map((s) => ({ id: s.id, name: s.name })),
        gateway,
        knownHostsFile(),
        client.baseUrl,
      );
      if (!o.write) return void process.stdout.write(text);
      const file = sshConfigFile();
      await writePrivate(file, text);
      console.log(`wrote ${running.length} session(s) to ${file} (host key pinned in ${known})`);
      console.log(`add this line at the top of ~/.ssh/config, once: Include ${file}`);
    });
}
