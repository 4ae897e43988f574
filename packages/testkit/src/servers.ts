import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import postgres from 'postgres';
import { startNatsServer, type ChildServer } from '@trainyard/servers';
import { tempDir } from './tmp.ts';

/**
 * A real `nats-server -js` of its own, on a free port, in a temp dir; `stop` removes it all.
 * `config` is the text of a configuration file for it (limits, accounts).
 */
export async function startTestNats(
  opts: { config?: string } = {},
): Promise<ChildServer & { dir: string }> {
  const dir = await tempDir('trainyard-nats-');
  const args: string[] = [];
  if (opts.config) {
    const file = join(dir.path, 'nats.conf');
    await writeFile(file, opts.config);
    args.push('-c', file);
  }
  const server = await startNatsServer({ dir: dir.path, args });
  return {
    ...server,
    dir: dir.path,
    stop: async () => {
      await server.stop();
      await dir.remove();
    },
    kill: server.kill,
  };
}

/** A database of its own on the shared test server; returns its URL. */
export async function createTestDatabase(serverUrl: string): Promise<string> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}
