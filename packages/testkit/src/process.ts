import { readdirSync, readFileSync } from 'node:fs';

export interface ProcessInfo {
  state: string;
  parent: number;
  group: number;
  /** CPU time in clock ticks: user and system, its reaped children's included. */
  cpuTicks: number;
}

/** What /proc says of a process: its state letter, parent, process group and CPU time; null once gone. */
export function processInfo(pid: number): ProcessInfo | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpuTicks = [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0);
    return { state: fields[0]!, parent: Number(fields[1]), group: Number(fields[2]), cpuTicks };
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
