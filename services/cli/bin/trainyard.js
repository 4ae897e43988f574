#!/usr/bin/env node
/**
 * `trainyard`. A command of the client's own runs from the bundle (`dist/`, made by
 * `scripts/bundle.ts`, which setup runs) while no file it was made of is newer: it starts in a
 * third of the time. Anything else runs from the TypeScript sources, through tsx.
 */
import { bundleFile, bundleManifest, isFresh } from './bundled.js';

const manifest = bundleManifest();
if (manifest?.commands.includes(process.argv[2]) && isFresh(manifest)) {
  const { main, CLIENT_ONLY } = await import(bundleFile.href);
  await main(process.argv, CLIENT_ONLY);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  const { main } = await import('../src/main.ts');
  await main(process.argv);
}
