/**
 * Packs the `trainyard` client for a machine without the repository (a laptop, a login node):
 * `npm run client:pack [-- --out DIR]` writes `trainyard-VERSION.tgz`, which
 * `npm install -g trainyard-VERSION.tgz` installs with nothing else. It holds the bundled client
 * (`dist/trainyard.mjs`, made again first) and a `bin`: no dependencies, no TypeScript, Node 20
 * or later. The server's commands are stand-ins there, which say that they need the server.
 */
import { execFile } from 'node:child_process';
import { copyFile, chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { bundleFile } from '../bin/bundled.js';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({ options: { out: { type: 'string' } } });
const out = resolve(values.out ?? join(cli, 'dist'));

/** The packed `trainyard`: every command from the bundle, the server's as stand-ins. */
const ENTRY = `#!/usr/bin/env node
import { main, serverNotInstalled } from '../trainyard.mjs';

await main(process.argv, serverNotInstalled());
`;

const { version, description } = JSON.parse(await readFile(join(cli, 'package.json'), 'utf8')) as {
  version: string;
  description: string;
};

const bundle = join(cli, 'scripts', 'bundle.ts');
await run(process.execPath, ['--import', 'tsx', bundle, '--force'], { cwd: cli });
const stage = await mkdtemp(join(tmpdir(), 'trainyard-client-pack-'));
try {
  await mkdir(join(stage, 'bin'));
  await copyFile(bundleFile, join(stage, 'trainyard.mjs'));
  await writeFile(join(stage, 'bin', 'trainyard.mjs'), ENTRY);
  await chmod(join(stage, 'bin', 'trainyard.mjs'), 0o755);
  const manifest = {
    name: 'trainyard',
    version,
    description,
    type: 'module',
    bin: { trainyard: 'bin/trainyard.mjs' },
    files: ['trainyard.mjs', 'bin/'],
    engines: { node: '>=20' },
  };
  await writeFile(join(stage, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  await mkdir(out, { recursive: true });
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', out], {
    cwd: stage,
  });
  const [packed] = JSON.parse(stdout) as { filename: string }[];
  const file = join(out, packed!.filename);
  const quoted = /^[\w./-]+$/.test(file) ? file : `'${file.replaceAll("'", `'\\''`)}'`;
  console.log(`${file}\ninstall it with: npm install -g ${quoted}`);
} finally {
  await rm(stage, { recursive: true, force: true });
}
