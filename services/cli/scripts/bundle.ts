/**
 * Makes the bundled client (`dist/trainyard.mjs`): the client's sources and its packages in one
 * file of JavaScript, which starts in a third of the time tsx takes to load the sources. Beside
 * it, `dist/manifest.json` names the commands it may run (the client's alone) and the files it
 * was made of (this script among them), so that `bin/trainyard.js` runs it only while none of
 * them is newer. A bundle that is still as new as its files is left as it is, unless `--force`.
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { bundleFile, bundleManifest, dist, isFresh } from '../bin/bundled.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const made = bundleManifest();
if (made && isFresh(made) && !process.argv.includes('--force')) process.exit(0);
const { clientCommands } = await import('../src/main.ts');

/** Writes `file` whole or not at all: a client starting meanwhile reads the old one or the new. */
async function replace(file: URL, content: string | Uint8Array): Promise<void> {
  const next = new URL(`${file.pathname}.${process.pid}`, file);
  await writeFile(next, content);
  await rename(next, file);
}

const result = await build({
  absWorkingDir: root,
  entryPoints: ['src/main.ts'],
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  write: false,
  metafile: true,
  logLevel: 'warning',
  external: ['@trainyard/stack'],
  // Bundled CommonJS packages (commander) require Node's modules: give them a require.
  banner: {
    js: "import { createRequire as trainyardRequire } from 'node:module'; const require = trainyardRequire(import.meta.url);",
  },
});
await mkdir(dist, { recursive: true });
await replace(bundleFile, result.outputFiles[0]!.contents);
const inputs = [...Object.keys(result.metafile.inputs), 'scripts/bundle.ts'];
await replace(
  new URL('manifest.json', dist),
  JSON.stringify({ commands: clientCommands(), inputs }),
);
