import { describe, expect, it } from 'vitest';
import { containerSpec, exitOfContainer } from '../src/index.ts';
import { runSpecIn } from './run-spec.ts';

const base = (over = {}) =>
  runSpecIn('/sandbox/a1', 'python3 train.py; echo "$(id)"', {
    image: '127.0.0.1:5000/trainyard/jobs@sha256:' + 'a'.repeat(64),
    gpus: [1, 3],
    gpuUuids: ['GPU-aaa', 'GPU-ccc'],
    user: { uid: 2000123, gid: 2000123 },
    ...over,
  });

describe('container spec', () => {
  it('gives the container only its GPUs, by UUID, numbered from 0 inside', () => {
    const c = containerSpec(base(), { workerName: 'w1', gpuDevices: 'nvidia' });
    expect(c.HostConfig?.DeviceRequests).toEqual([
      { Driver: 'nvidia', DeviceIDs: ['GPU-aaa', 'GPU-ccc'], Capabilities: [['gpu']] },
    ]);
    expect(c.Env).toContain('CUDA_VISIBLE_DEVICES=0,1');
    expect(c.Env).toContain('CUDA_DEVICE_ORDER=PCI_BUS_ID');
  });

  it('asks for no device where GPUs are simulated, and then the container sees none', () => {
    const c = containerSpec(base({ env: { NVIDIA_VISIBLE_DEVICES: 'all' } }), {
      workerName: 'w1',
      gpuDevices: 'none',
    });
    expect(c.HostConfig?.DeviceRequests).toBeUndefined();
    expect(c.Env).toContain('NVIDIA_VISIBLE_DEVICES=void');
    expect(c.Env).not.toContain('NVIDIA_VISIBLE_DEVICES=all');
  });

  it('refuses to start GPUs it cannot name by UUID, rather than give it none or all', () => {
    expect(() =>
      containerSpec(base({ gpuUuids: ['GPU-aaa'] }), { workerName: 'w1', gpuDevices: 'nvidia' }),
    ).toThrow(/UUIDs of GPUs 1,3/);
  });

  it('passes the command as one argument, runs as the attempt’s uid, off the network, within its limits', () => {
    const c = containerSpec(base({ memoryBytes: 2 * 1024 ** 3, cpus: 3 }), { workerName: 'w1' });
    const command = 'python3 train.py; echo "$(id)"';
    expect(c.Cmd).toEqual(['/bin/sh', '-c', expect.any(String), 'sh', command]);
    expect((c.Cmd as string[])[2]).not.toContain('python3');
    expect(c.StopSignal).toBe('SIGTERM');
    expect(c.Entrypoint).toEqual(['']);
    expect(c.User).toBe('2000123:2000123');
    expect(c.HostConfig).toMatchObject({
      NetworkMode: 'none',
      Memory: 2 * 1024 ** 3,
      MemorySwap: 2 * 1024 ** 3,
      NanoCpus: 3e9,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Init: true,
      Binds: ['/sandbox/a1/out:/trainyard/outputs:rw'],
    });
    expect(c.Labels).toEqual({
      'trainyard.job': 'job_1',
      'trainyard.attempt': 'att_1',
      'trainyard.worker': 'w1',
    });
  });

  it('mounts the attempt’s metrics directory and names its file as the container sees it', () => {
    const c = containerSpec(base({ metricsFile: '/sandbox/a1/metrics/metrics.jsonl' }), {
      workerName: 'w1',
    });
    expect(c.HostConfig?.Binds).toEqual([
      '/sandbox/a1/out:/trainyard/outputs:rw',
      '/sandbox/a1/metrics:/trainyard/metrics:rw',
    ]);
    expect(c.Env).toContain('TRAINYARD_METRICS_FILE=/trainyard/metrics/metrics.jsonl');
    expect(containerSpec(base(), { workerName: 'w1' }).Env?.join('\n')).not.toContain(
      'TRAINYARD_METRICS_FILE',
    );
  });

  it('reads a container’s end: out of memory, a signal, an exit code', () => {
    expect(exitOfContainer({ ExitCode: 137, OOMKilled: true })).toEqual({ kind: 'oom' });
    expect(exitOfContainer({ ExitCode: 137, OOMKilled: false })).toEqual({
      kind: 'signalled',
      signal: 'SIGKILL',
    });
    expect(exitOfContainer({ ExitCode: 2 })).toEqual({ kind: 'exited', exitCode: 2 });
  });
});
