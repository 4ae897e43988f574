/**
 * The bundled client (`dist/`, made by `scripts/bundle.ts`): its manifest, and whether it is as
 * new as every file it was made of.
 */
import { readFileSync, statSync } from 'node:fs';
import { URL } from 'node:url';

export const dist = new URL('../dist/', import.meta.url);
export const bundleFile = new URL('trainyard.mjs', dist);

/** The bundle's manifest (`commands` it may run, `inputs` it was made of); null without one. */
export function bundleManifest() {
  try {
    return JSON.parse(readFileSync(new URL('manifest.json', dist), 'utf8'));
  } catch {
    return null;
  }
}

/** Whether the bundle is there and no file it was made of is newer. */
export function isFresh(manifest) {
  try {
    const built = statSync(bundleFile).mtimeMs;
    const root = new URL('../', dist);
    return !manifest.inputs.some((file) => statSync(new URL(file, root)).mtimeMs > built);
  } catch {
    return false;
  }
}
