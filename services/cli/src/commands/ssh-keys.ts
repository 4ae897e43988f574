import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { cleanName } from '../output.ts';
import type { SshKeyView } from '../views.ts';
import { printJson, printTable } from './table.ts';

/** The public keys `ssh-key add` looks for when given no file, in this order. */
const DEFAULT_KEYS = ['id_ed25519.pub', 'id_rsa.pub'];

/** The public key line to register: from `file`, or the first of the usual ones that exists. */
function readPublicKey(file: string | undefined): { file: string; line: string } {
  const candidates = file ? [file] : DEFAULT_KEYS.map((k) => join(homedir(), '.ssh', k));
  const found = candidates.find((f) => existsSync(f));
  if (!found) {
    throw new CliError(
      file
        ? `${file}: no such file`
        : `no public key at ${candidates.join(' or ')}: make one with \`ssh-keygen -t ed25519\`, or name a .pub file`,
      'NO_KEY',
    );
  }
  let text: string;
  try {
    text = readFileSync(found, 'utf8');
  } catch (err) {
    throw new CliError(`${found}: ${(err as Error).message}`, 'NO_KEY');
  }
  if (text.includes('PRIVATE KEY'))
    throw new CliError(`${found} is a private key: give its public half (${found}.pub)`, 'NO_KEY');
  return { file: found, line: text.trim() };
}

/** `trainyard ssh-key add|ls|rm`: the keys that log you in to your sessions. */
export function registerSshKeyCommands(program: Command): void {
  const keys = program
    .command('ssh-key')
    .description('the SSH public keys that log you in to your sessions');

  keys
    .command('add')
    .description(`register a public key (default: ~/.ssh/${DEFAULT_KEYS.join(', then ')})`)
    .argument('[file]', 'a .pub file')
    .option('--name <name>', "what to call it (default: the key's comment)")
    .option('--json', 'print JSON')
    .action(async (file: string | undefined, o: { name?: string; json?: boolean }) => {
      const { file: from, line } = readPublicKey(file);
      const key = await ApiClient.fromEnv()
        .post<SshKeyView>('/v1/me/ssh-keys', {
          publicKey: line,
          ...(o.name !== undefined && { name: o.name }),
        })
        .catch((err: unknown) => {
          if (err instanceof CliError && err.code === 'VALIDATION_FAILED')
            throw new CliError(`${from}: ${err.message.replace(/^publicKey: /, '')}`, err.code);
          throw err;
        });
      if (o.json) return printJson(key);
      console.log(
        `added ${key.fingerprint} (${key.type}${key.name ? `, ${cleanName(key.name)}` : ''})`,
      );
    });

  keys
    .command('ls')
    .description('list your keys')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const list = await ApiClient.fromEnv().json<SshKeyView[]>('/v1/me/ssh-keys');
      if (o.json) return printJson(list);
      printTable(
        ['FINGERPRINT', 'TYPE', 'NAME', 'ADDED'],
        list.map((k) => [k.fingerprint, k.type, k.name, k.addedAt]),
      );
    });

  keys
    .command('rm')
    .description('remove one of your keys')
    .argument('<fingerprint>', 'SHA256:…, as `trainyard ssh-key ls` shows it')
    .action(async (fingerprint: string) => {
      await ApiClient.fromEnv().request(`/v1/me/ssh-keys/${encodeURIComponent(fingerprint)}`, {
        method: 'DELETE',
      });
      console.log(`removed ${fingerprint}`);
    });
}
