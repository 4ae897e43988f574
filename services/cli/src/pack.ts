import { readdirSync, readFileSync, lstatSync } from 'node:fs';
import { join, posix } from 'node:path';
import type { Readable } from 'node:stream';
import ignore, { type Ignore } from 'ignore';
import * as tar from 'tar';

/** Left out of every upload, before any ignore file is read. */
export const ALWAYS_LEFT_OUT = ['.git/', 'node_modules/', '.trainyard/'];

/** The ignore files read in every directory, in this order: a later rule wins. */
const IGNORE_FILES = ['.gitignore', '.trainyardignore'];

interface Rules {
  /** The directory the rules are relative to, from the root ('' for the root). */
  base: string;
  source: string;
  ig: Ignore;
}

/** What `submit` would upload, and what it leaves out and why. */
export interface PackPlan {
  files: string[];
  bytes: number;
  leftOut: { path: string; source: string }[];
}

function rulesIn(root: string, dir: string): Rules[] {
  const found: Rules[] = [];
  for (const name of IGNORE_FILES) {
    let text: string;
    try {
      text = readFileSync(join(root, dir, name), 'utf8');
    } catch {
      continue;
    }
    found.push({ base: dir, source: posix.join(dir, name), ig: ignore().add(text) });
  }
  return found;
}

/**
 * Whether `path` (a directory when it ends in `/`) is left out, and by which file: the rules of
 * every directory above it apply, nearer ones last, as git reads `.gitignore` files.
 */
function verdict(path: string, rules: Rules[]): string | null {
  let by: string | null = null;
  for (const r of rules) {
    const rel = r.base ? path.slice(r.base.length + 1) : path;
    const { ignored, unignored } = r.ig.test(rel);
    if (ignored) by = r.source;
    else if (unignored) by = null;
  }
  return by;
}

/**
 * Walks `root` and decides file by file what to upload: everything but what `.gitignore` and
 * `.trainyardignore` files (in any directory) leave out, and `.git`, `node_modules` and
 * `.trainyard`. A directory left out is not entered, so nothing inside it comes back.
 */
export function planPack(root: string): PackPlan {
  const defaults: Rules = { base: '', source: 'always', ig: ignore().add(ALWAYS_LEFT_OUT) };
  const plan: PackPlan = { files: [], bytes: 0, leftOut: [] };
  const walk = (dir: string, inherited: Rules[]) => {
    const rules = [...inherited, ...rulesIn(root, dir)];
    const entries = readdirSync(join(root, dir), { withFileTypes: true }).sort((a, b) =>
      a.name < b.name ? -1 : 1,
    );
    for (const entry of entries) {
      const path = dir ? `${dir}/${entry.name}` : entry.name;
      const isDir = entry.isDirectory();
      const by = verdict(isDir ? `${path}/` : path, rules);
      if (by) {
        plan.leftOut.push({ path: isDir ? `${path}/` : path, source: by });
        continue;
      }
      if (isDir) walk(path, rules);
      else {
        plan.files.push(path);
        plan.bytes += lstatSync(join(root, path)).size;
      }
    }
  };
  walk('', [defaults]);
  return plan;
}

/** The planned files as a gzipped tarball stream. */
export function packFiles(root: string, files: string[]): Readable {
  return tar.c(
    { gzip: true, cwd: root, portable: true, noDirRecurse: true },
    files,
  ) as unknown as Readable;
}
