/**
 * Packs the `trainyard` client for a machine without the repository (a laptop, a login node):
 * `npm run client:pack [-- --out DIR]` writes `trainyard-VERSION.tgz`, which
 * `npm install -g trainyard-VERSION.tgz` installs with nothing else. It holds the bundled client
 * (`dist/trainyard.mjs`, made first if it is missing or older than its sources) and a `bin`: no
 * dependencies, no TypeScript, Node 20 or later. The server's commands say there that they need
 * the server installed.
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

const ENTRY = `#!/usr/bin/env node
import { main } from '../trainyard.mjs';

await main(process.argv);
`;

const { version, description } = JSON.parse(await readFile(join(cli, 'package.json'), 'utf8')) as {
  version: string;
  description: string;
};

await run(process.execPath, ['--import', 'tsx', join(cli, 'scripts', 'bundle.ts')], { cwd: cli });
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
  console.log(`${file}\ninstall it with: npm install -g ${file}`);
} finally {
  await rm(stage, { recursive: true, force: true });
}
