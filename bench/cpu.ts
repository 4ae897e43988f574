import { processInfo } from '@trainyard/testkit';

const TICKS_PER_SECOND = 100;

/** CPU time (user + system, ms) of a process and all its reaped descendants; 0 once gone. */
export function cpuMsOf(pid: number): number {
  return ((processInfo(pid)?.cpuTicks ?? 0) * 1000) / TICKS_PER_SECOND;
}

/** Samples CPU time of named groups of processes; `since` gives the ms each spent since `mark`. */
export class CpuMeter {
  #start = new Map<string, number>();
  constructor(private readonly groups: Record<string, () => number[]>) {}

  #now(): Map<string, number> {
    return new Map(
      Object.entries(this.groups).map(([name, pids]) => [
        name,
        pids().reduce((s, p) => s + cpuMsOf(p), 0),
      ]),
    );
  }

  mark(): void {
    this.#start = this.#now();
  }

  since(): Record<string, number> {
    const now = this.#now();
    return Object.fromEntries(
      [...now].map(([name, ms]) => [name, Math.round(ms - (this.#start.get(name) ?? 0))]),
    );
  }
}
