import { describe, expect, it } from 'vitest';
import { jobNeed, noWorkerCouldHold } from '@trainyard/domain';
import type { JobSpec } from '@trainyard/events';
import type { WorkerRow } from '@trainyard/projections';
import { workerShapeOf } from '../src/queue.ts';

const GiB = 1024 ** 3;

const row = (capacity: WorkerRow['capacity']): WorkerRow => ({
  id: 'w1',
  hostname: 'h',
  status: 'online',
  gpus: [{ index: 0, name: 'NVIDIA L4', uuid: 'u', vramBytes: 24 * GiB, simulated: false }],
  cpu_slots: 2,
  capacity,
  runtime: 'process',
  version: 't',
  registered_at: new Date(),
  updated_at: new Date(),
});

const spec = (resources: JobSpec['resources']): JobSpec => ({
  name: 'j',
  command: 'true',
  resources,
  priority: 0,
  maxRetries: 3,
  env: {},
});

describe('the check at submit, on the workers’ projection', () => {
  it('refuses nothing on what a row projected before capacities does not say', () => {
    const old = [workerShapeOf(row(null))];
    // A probe needs dispatch version 2, a memory limit a worker that holds one: unknown here.
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 1 })), old)).toBe(false);
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 0, memoryGb: 1 })), old)).toBe(false);
    // What the row does say still counts.
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 2, vramGb: 1 })), old)).toBe(true);
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 1, vramGb: 30 })), old)).toBe(true);
  });

  it('reads what a row with its capacity says', () => {
    const known = [
      workerShapeOf(row({ memoryBytes: 8 * GiB, limitsMemory: false, dispatchVersion: 1 })),
    ];
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 1 })), known)).toBe(true);
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 0, memoryGb: 1 })), known)).toBe(true);
    expect(noWorkerCouldHold(jobNeed(spec({ gpus: 1, vramGb: 8 })), known)).toBe(false);
  });
});
