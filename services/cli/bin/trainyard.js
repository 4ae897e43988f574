#!/usr/bin/env node
/**
 * `trainyard`. A command of the client's own runs from the bundle (`dist/`, made by
 * `scripts/bundle.ts`, which setup runs) while no file it was made of is newer: it starts in a
 * third of the time. Anything else runs from the TypeScript sources, through tsx.
 */
import { readFileSync, statSync } from 'node:fs';
import { URL } from 'node:url';

const dist = new URL('../dist/', import.meta.url);

/** The bundle, if it may run `command`: it holds it, and is as new as its sources. */
function freshBundle(command) {
  try {
    const manifest = JSON.parse(readFileSync(new URL('manifest.json', dist), 'utf8'));
    if (!manifest.commands.includes(command)) return null;
    const bundle = new URL('trainyard.mjs', dist);
    const built = statSync(bundle).mtimeMs;
    const root = new URL('../', dist);
    if (manifest.inputs.some((file) => statSync(new URL(file, root)).mtimeMs > built)) return null;
    return bundle;
  } catch {
    return null;
  }
}

const bundle = freshBundle(process.argv[2]);
if (bundle) {
  const { main, CLIENT_ONLY } = await import(bundle.href);
  await main(process.argv, CLIENT_ONLY);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  const { main } = await import('../src/main.ts');
  await main(process.argv);
}
