import {
  closeSync,
  copyFileSync,
  fstatSync,
  mkdirSync,
  openSync,
  readSync,
  statSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JOB_FILE } from './file-tail.ts';
import { shellQuote } from './shell.ts';
import type { RunSpec } from './types.ts';

/**
 * Trainyard's probe wrapper: a `sitecustomize` module that every Python process of the command
 * loads, which counts its optimizer steps, measures its peak memory and stops it by its rule.
 */
export const PROBE_WRAPPER = fileURLToPath(new URL('../probe/sitecustomize.py', import.meta.url));

/** Where an attempt's probe lives on the host, and when it stops the command. */
export interface ProbeSpec {
  /** A directory of the attempt's own, holding the wrapper and, once written, its report. */
  dir: string;
  maxSteps: number;
  plateauSteps: number;
}

const REPORT = 'report.json';
/** The most of a report that is read: the job writes it, and a real one is a few hundred bytes. */
const REPORT_MAX_BYTES = 64 * 1024;

/**
 * Puts the wrapper in `dir`, which is then to be given to the attempt's user, so that its probe
 * can report there.
 */
export function installProbe(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  copyFileSync(PROBE_WRAPPER, join(dir, 'sitecustomize.py'));
}

/** The variables the wrapper reads: where to report (in `dir` as the command sees it), when to stop. */
export function probeEnv(probe: ProbeSpec, dir = probe.dir): Record<string, string> {
  return {
    TRAINYARD_PROBE_REPORT: join(dir, REPORT),
    TRAINYARD_PROBE_MAX_STEPS: String(probe.maxSteps),
    TRAINYARD_PROBE_PLATEAU_STEPS: String(probe.plateauSteps),
  };
}

/**
 * The probe's report as its wrapper left it, parsed but not validated; null when there is none
 * or it is not a small regular file of JSON that the owner of `dir` (the job's user) owns. The
 * job can write the file, so it is opened without following a link and read no further than a
 * report can be long.
 */
export function readProbeReport(dir: string): unknown {
  let fd: number;
  try {
    fd = openSync(join(dir, REPORT), JOB_FILE);
  } catch {
    return null;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || stat.uid !== statSync(dir).uid || stat.size > REPORT_MAX_BYTES)
      return null;
    const buf = Buffer.alloc(stat.size);
    const n = readSync(fd, buf, 0, stat.size, 0);
    return JSON.parse(buf.subarray(0, n).toString('utf8')) as unknown;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/**
 * What a probe's command runs with, after `setup` (which the probe does not measure): the
 * wrapper's variables, and its directory first on Python's path so that every Python process
 * of the command loads it.
 */
export function probeExports(spec: RunSpec): string[] {
  if (!spec.probe) return [];
  const path = [spec.probe.dir, spec.env.PYTHONPATH].filter(Boolean).join(':');
  return Object.entries({ ...probeEnv(spec.probe), PYTHONPATH: path }).map(
    ([name, value]) => `export ${shellQuote(`${name}=${value}`)}`,
  );
}
