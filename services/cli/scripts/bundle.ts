/**
 * Makes the bundled client (`dist/trainyard.mjs`): the client's sources and its packages in one
 * file of JavaScript, which starts in a third of the time tsx takes to load the sources. Beside
 * it, `dist/manifest.json` names the commands it may run (the client's alone) and the files it
 * was made of, so that `bin/trainyard.js` runs it only while none of them is newer.
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { clientCommands } from '../src/main.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = new URL('../dist/', import.meta.url);

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
await replace(new URL('trainyard.mjs', dist), result.outputFiles[0]!.contents);
await replace(
  new URL('manifest.json', dist),
  JSON.stringify({ commands: clientCommands(), inputs: Object.keys(result.metafile.inputs) }),
);
