import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

/** What `trainyard up` writes so that other commands on this machine can find the stack. */
export interface StackInfo {
  apiUrl: string;
  natsUrl: string;
  databaseUrl: string;
  pid: number;
}

export const homeDirOf = (env = process.env) => resolve(env.TRAINYARD_HOME ?? '.trainyard');
export const stackFile = (env = process.env) => join(homeDirOf(env), 'stack.json');

/** The running embedded stack's addresses, if `trainyard up` runs from this directory. */
export function readStack(env = process.env): StackInfo | null {
  const file = stackFile(env);
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as StackInfo;
  } catch {
    return null;
  }
}

export interface CliCredentials {
  apiUrl: string;
  token: string;
  username: string;
}

export const credentialsFile = (env = process.env) =>
  env.TRAINYARD_CREDENTIALS ?? join(homedir(), '.config', 'trainyard', 'credentials.json');

export function readCredentials(env = process.env): CliCredentials | null {
  const file = credentialsFile(env);
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as CliCredentials;
  } catch {
    return null;
  }
}

export async function writeCredentials(creds: CliCredentials, env = process.env): Promise<void> {
  const file = credentialsFile(env);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeFile(file, JSON.stringify(creds, null, 2), { mode: 0o600 });
}

/** The API to talk to: `--api`, `TRAINYARD_API_URL`, the saved login, the local stack, or the default. */
export function apiUrl(explicit?: string, env = process.env): string {
  return (
    explicit ??
    env.TRAINYARD_API_URL ??
    readCredentials(env)?.apiUrl ??
    readStack(env)?.apiUrl ??
    `http://127.0.0.1:${env.TRAINYARD_PORT ?? '8080'}`
  ).replace(/\/$/, '');
}
