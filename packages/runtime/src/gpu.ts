import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Gpu } from '@trainyard/events';

const run = promisify(execFile);
const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** Live memory use of one GPU. */
export interface GpuReading {
  index: number;
  usedBytes: number;
  utilPct: number;
}

/** Finds GPUs and reads their use. One implementation per source. */
export interface GpuInventory {
  list(): Promise<Gpu[]>;
  read(): Promise<GpuReading[]>;
}

const QUERY = 'index,name,uuid,memory.total,memory.used,utilization.gpu';

function parseCsv(text: string): string[][] {
  return text
    .trim()
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => l.split(',').map((c) => c.trim()));
}

const num = (s: string | undefined) => (s && /^\d+(\.\d+)?$/.test(s) ? Number(s) : 0);

/** GPUs as `nvidia-smi` reports them. */
export class NvidiaSmiInventory implements GpuInventory {
  constructor(private readonly binary = 'nvidia-smi') {}

  async #query(): Promise<string[][]> {
    const { stdout } = await run(
      this.binary,
      [`--query-gpu=${QUERY}`, '--format=csv,noheader,nounits'],
      {
        timeout: 10_000,
      },
    );
    return parseCsv(stdout);
  }

  async list(): Promise<Gpu[]> {
    return (await this.#query()).map(([index, name, uuid, total]) => ({
      index: num(index),
      name: name ?? 'unknown',
      uuid: uuid ?? '',
      vramBytes: num(total) * MiB,
      simulated: false,
    }));
  }

  async read(): Promise<GpuReading[]> {
    return (await this.#query()).map(([index, , , , used, util]) => ({
      index: num(index),
      usedBytes: num(used) * MiB,
      utilPct: num(util),
    }));
  }

  /** True when `nvidia-smi` runs and lists at least one GPU. */
  async available(): Promise<boolean> {
    return this.list().then(
      (gpus) => gpus.length > 0,
      () => false,
    );
  }
}

/** Simulated GPUs for tests and benchmarks; every one is marked `simulated`. */
export class SimulatedInventory implements GpuInventory {
  constructor(private readonly gpus: Gpu[]) {}

  /** Parses a shape like `2x24GiB` or `4x80GiB`. */
  static parse(shape: string): SimulatedInventory {
    const m = /^(\d+)x(\d+(?:\.\d+)?)GiB$/i.exec(shape.trim());
    if (!m) throw new Error(`simulated GPUs must look like 2x24GiB, got "${shape}"`);
    const count = Number(m[1]);
    const bytes = Math.round(Number(m[2]) * GiB);
    return new SimulatedInventory(
      Array.from({ length: count }, (_, index) => ({
        index,
        name: `Simulated GPU ${m[2]}GiB`,
        uuid: `SIM-${index}`,
        vramBytes: bytes,
        simulated: true,
      })),
    );
  }

  async list(): Promise<Gpu[]> {
    return this.gpus;
  }

  async read(): Promise<GpuReading[]> {
    return this.gpus.map((g) => ({ index: g.index, usedBytes: 0, utilPct: 0 }));
  }
}

/** No GPUs: a CPU-only worker. */
export class NoGpuInventory implements GpuInventory {
  async list(): Promise<Gpu[]> {
    return [];
  }
  async read(): Promise<GpuReading[]> {
    return [];
  }
}
