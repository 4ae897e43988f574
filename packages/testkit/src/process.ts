import { readdirSync, readFileSync } from 'node:fs';

/** What /proc says of a process: its state letter, parent and process group; null once gone. */
export function processInfo(pid: number): { state: string; parent: number; group: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [state, parent, group] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: state!, parent: Number(parent), group: Number(group) };
  } catch {
    return null;
  }
}

/** Whether a process runs. A zombie (dead, not yet reaped by its new parent) counts as gone. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const info = processInfo(pid);
  return info !== null && info.state !== 'Z';
}

/** Pids of every process whose command line contains `needle`. */
export function pidsMatching(needle: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle);
      } catch {
        return false;
      }
    });
}
