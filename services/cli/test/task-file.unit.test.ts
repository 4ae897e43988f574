import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { readTaskFile } from '../src/task-file.ts';

const dirs: Awaited<ReturnType<typeof tempDir>>[] = [];
afterAll(() => Promise.all(dirs.map((dir) => dir.remove())));

async function taskFile(text: string): Promise<string> {
  const dir = await tempDir('trainyard-task-');
  dirs.push(dir);
  const path = join(dir.path, 'trainyard.yaml');
  await writeFile(path, text);
  return path;
}

const mistake = async (text: string) => {
  const path = await taskFile(text);
  try {
    readTaskFile(path, 'job');
  } catch (err) {
    return (err as Error).message.replace(path, 'FILE');
  }
  throw new Error('the task file was taken');
};

describe('a task file', () => {
  it('gives a job spec, named after its directory unless it says, with durations and lists', async () => {
    const path = await taskFile(`# resnet on one GPU
command: python train.py --epochs 3
resources:
  gpus: 1
  vramGb: 20
timeLimit: 2h
dependsOn: [job_prepare]
env:
  EPOCHS: "3"
`);
    const task = readTaskFile(path, 'resnet');
    expect(task.spec).toEqual({
      name: 'resnet',
      command: 'python train.py --epochs 3',
      resources: { gpus: 1, vramGb: 20 },
      timeLimit: '2h',
      dependsOn: ['job_prepare'],
      env: { EPOCHS: '3' },
    });
    expect(task.where('resources.vramGb')).toBe(`${path}:5`);
    expect(task.where('dependsOn.0')).toBe(`${path}:7`);
    expect(task.where('env.MISSING')).toBe(`${path}:8`);
  });

  it('names the line of each mistake', async () => {
    expect(await mistake('command: echo hi\nresources:\n  gpus: -1\n')).toBe(
      'FILE:3: resources.gpus: Too small: expected number to be >=0',
    );
    expect(await mistake('command: echo hi\nresources: {gpus: 0}\nnodes: 0\n')).toBe(
      'FILE:3: nodes: Too small: expected number to be >=1',
    );
    expect(await mistake('command: echo hi\nresources: {gpus: 0}\nworkers: 4\n')).toBe(
      'FILE:3: workers: Unrecognized key: "workers"',
    );
    expect(await mistake('command: echo hi\nresources: {gpus: 0}\nshards: 0\n')).toBe(
      'FILE:3: shards: Too small: expected number to be >=1',
    );
    expect(await mistake('command: echo hi\nresources:\n  gpus: 1\n  vram: 8\n')).toBe(
      'FILE:4: resources.vram: Unrecognized key: "vram"',
    );
    expect(await mistake('command: echo hi\nresources: {gpus: 0}\ntimeLimit: soon\n')).toBe(
      'FILE:3: timeLimit: a duration such as 90s, 45m, 2h or 1h30m',
    );
    expect(await mistake('name: x\nresources: {gpus: 0}\n')).toMatch(/^FILE:1: command: /);
    // YAML reads a bare true as a boolean, not as the command.
    expect(await mistake('command: true\nresources: {gpus: 0}\n')).toBe(
      'FILE:1: command: Invalid input: expected string, received boolean',
    );
    expect(await mistake('command: [unclosed\n')).toMatch(/^FILE:\d+: /);
    expect(await mistake('command: a\ncommand: b\n')).toMatch(/^FILE:2: Map keys must be unique/);
    expect(await mistake('- just\n- a list\n')).toBe(
      "FILE:1: a task file is a mapping of a job's fields (name, command, resources, ...)",
    );
  });

  it('says so when the file cannot be read, is not a file, is huge or expands without end', async () => {
    expect(() => readTaskFile('/nonexistent/trainyard.yaml', 'job')).toThrow(
      /^-f \/nonexistent\/trainyard.yaml: ENOENT/,
    );
    expect(() => readTaskFile('/dev/zero', 'job')).toThrow('-f /dev/zero: not a regular file');
    const huge = await taskFile(`command: echo ${'x'.repeat(1024 * 1024)}\n`);
    expect(() => readTaskFile(huge, 'job')).toThrow(`-f ${huge}: over 1048576 bytes`);
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 12; i++)
      bomb.push(
        `${'b'.repeat(i + 1)}: &${'b'.repeat(i + 1)} [${Array(10)
          .fill(i === 0 ? '*a' : `*${'b'.repeat(i)}`)
          .join(', ')}]`,
      );
    const aliases = await taskFile(`${bomb.join('\n')}\ncommand: echo hi\n`);
    expect(() => readTaskFile(aliases, 'job')).toThrow(new RegExp(`^${aliases}: `));
  });
});
