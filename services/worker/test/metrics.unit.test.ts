import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { chownSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JetStreamClient } from '@nats-io/jetstream';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_METRIC_POINTS, type MetricPoint } from '@trainyard/events';
import { MetricsCollector } from '../src/metrics.ts';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** An attempt's sandbox: its metrics directory, and where the worker keeps its progress. */
function sandbox() {
  const root = mkdtempSync(join(tmpdir(), 'ty-metrics-'));
  dirs.push(root);
  mkdirSync(join(root, 'metrics'));
  return {
    root,
    file: join(root, 'metrics', 'metrics.jsonl'),
    progressFile: join(root, 'metrics.progress'),
    log: join(root, 'attempt.log'),
  };
}

function collector(
  box: ReturnType<typeof sandbox>,
  opts: { file?: boolean; resumed?: boolean; signal?: AbortSignal; refuse?: boolean } = {},
) {
  const published: { subject: string; bytes: number; points: MetricPoint[] }[] = [];
  const warnings: string[] = [];
  const js = {
    publish: async (subject: string, data: string) => {
      if (opts.refuse) throw new Error('no responders');
      published.push({
        subject,
        bytes: data.length,
        ...(JSON.parse(data) as { points: MetricPoint[] }),
      });
      return { seq: published.length };
    },
  } as unknown as JetStreamClient;
  const log = { warn: (_: object, m: string) => warnings.push(m), info: () => undefined };
  const c = new MetricsCollector(js, 'ty.metric.j.1.w', log, {
    progressFile: box.progressFile,
    ...(opts.file !== false && { file: box.file }),
    ...(opts.resumed && { resumed: true }),
    ...(opts.signal && { signal: opts.signal }),
  });
  return { c, published, points: () => published.flatMap((p) => p.points), warnings };
}

describe('MetricsCollector', () => {
  it('publishes the metric lines of the output and of the file, each named by where it is, and records how far it sent', async () => {
    const box = sandbox();
    writeFileSync(box.file, '{"step":1,"acc":0.5}\nnot json\n{"step":2,"acc":0.75}\n');
    const { c, published, points } = collector(box);
    c.output(Buffer.from('starting\nhello\nTRAINYARD_METRIC {"step":1,"loss":2}\n'));
    c.output(Buffer.from('TRAINYARD_METRIC {"loss":"bad"}\nTRAINYARD_METRIC {"step":2,'));
    c.output(Buffer.from('"loss":1}\n'));
    await c.end();
    expect(published.every((p) => p.subject === 'ty.metric.j.1.w')).toBe(true);
    const seen = points().map(({ source, offset, step, values }) => ({
      source,
      offset,
      step,
      values,
    }));
    expect(seen).toEqual(
      expect.arrayContaining([
        { source: 'output', offset: 15, step: 1, values: { loss: 2 } },
        { source: 'output', offset: 84, step: 2, values: { loss: 1 } },
        { source: 'file', offset: 0, step: 1, values: { acc: 0.5 } },
        { source: 'file', offset: 30, step: 2, values: { acc: 0.75 } },
      ]),
    );
    expect(seen).toHaveLength(4);
    expect(JSON.parse(readFileSync(box.progressFile, 'utf8'))).toEqual({
      output: 121,
      file: 52,
      taken: 4,
    });
  });

  /** An output whose first 70 bytes a worker before read, cut inside its third line. */
  const OUTPUT =
    'hello\nTRAINYARD_METRIC {"step":0,"loss":3}\nTRAINYARD_METRIC {"step":1,"loss":2}\n' +
    'TRAINYARD_METRIC {"loss":"bad"}\nTRAINYARD_METRIC {"step":2,"loss":1}\n';
  const SHIPPED = 70;

  it('after a worker restart, reads again what the worker before read but had not sent', async () => {
    const box = sandbox();
    writeFileSync(box.log, OUTPUT);
    writeFileSync(box.progressFile, JSON.stringify({ output: 43, file: 0, taken: 1 }));
    const { c, points } = collector(box, { resumed: true });
    await c.rescan(box.log, SHIPPED);
    c.output(Buffer.from(OUTPUT.slice(SHIPPED)));
    await c.end();
    expect(points().map((p) => [p.offset, p.step, p.values.loss])).toEqual([
      [43, 1, 2],
      [112, 2, 1],
    ]);
    expect(JSON.parse(readFileSync(box.progressFile, 'utf8'))).toMatchObject({ taken: 3 });
  });

  it('reads the whole output again when the worker before recorded nothing', async () => {
    const box = sandbox();
    writeFileSync(box.log, OUTPUT);
    const { c, points } = collector(box, { resumed: true });
    await c.rescan(box.log, SHIPPED);
    c.output(Buffer.from(OUTPUT.slice(SHIPPED)));
    await c.end();
    expect(points().map((p) => p.offset)).toEqual([6, 43, 112]);
  });

  it('goes on from where the output was when it cannot read it again', async () => {
    const box = sandbox();
    const { c, points, warnings } = collector(box, { resumed: true });
    await c.rescan(join(box.root, 'gone.log'), SHIPPED);
    c.output(Buffer.from(OUTPUT.slice(SHIPPED)));
    await c.end();
    expect(points().map((p) => [p.offset, p.step])).toEqual([[112, 2]]);
    expect(warnings).toEqual(['could not read the output again for metrics']);
  });

  it('sends batches well under what a NATS message may hold', async () => {
    const box = sandbox();
    const { c, published } = collector(box, { file: false });
    const values = Object.fromEntries(
      Array.from({ length: 32 }, (_, i) => [
        `metric_with_a_long_name_${String(i).padStart(30, '0')}`,
        1e20 + i,
      ]),
    );
    const line = `TRAINYARD_METRIC ${JSON.stringify(values)}\n`;
    c.output(Buffer.from(line.repeat(600)));
    await c.end();
    expect(published.flatMap((p) => p.points)).toHaveLength(600);
    expect(Math.max(...published.map((p) => p.bytes))).toBeLessThan(300 * 1024);
  });

  it('gives up sending when the worker stops, rather than hold the attempt’s end', async () => {
    const box = sandbox();
    const stopping = new AbortController();
    const { c, warnings } = collector(box, { file: false, refuse: true, signal: stopping.signal });
    c.output(Buffer.from('TRAINYARD_METRIC {"loss":1}\n'));
    setTimeout(() => stopping.abort(), 300);
    await c.end();
    expect(warnings).toEqual(['metrics not sent']);
  });

  it('does not follow a link the job put where its metrics file goes', async () => {
    const box = sandbox();
    const secret = join(box.root, 'secret.jsonl');
    writeFileSync(secret, '{"stolen":1}\n');
    symlinkSync(secret, box.file);
    const { c, points } = collector(box);
    await c.end();
    expect(points()).toEqual([]);
  });

  it.skipIf(process.getuid?.() !== 0)(
    'does not read a file someone other than the directory’s owner made',
    async () => {
      const box = sandbox();
      writeFileSync(box.file, '{"x":1}\n');
      chownSync(join(box.root, 'metrics'), 4242, 4242);
      const { c, points } = collector(box);
      await c.end();
      expect(points()).toEqual([]);
    },
  );

  it('reads a huge, sparse metrics file only as far as its limit, and stops after too many bad lines', async () => {
    const box = sandbox();
    writeFileSync(box.file, '{"first":1}\n');
    truncateSync(box.file, 1024 ** 4);
    const sparse = collector(box);
    await sparse.c.end();
    expect(sparse.points().map((p) => p.values)).toEqual([{ first: 1 }]);

    const noisy = sandbox();
    writeFileSync(noisy.file, 'x\n'.repeat(10_000) + '{"late":1}\n');
    const bad = collector(noisy);
    await bad.c.end();
    expect(bad.points()).toEqual([]);
  });

  it(`keeps no more than ${MAX_METRIC_POINTS} points`, async () => {
    const box = sandbox();
    const { c, points } = collector(box, { file: false });
    c.output(Buffer.from('TRAINYARD_METRIC {"loss":1}\n'.repeat(MAX_METRIC_POINTS + 50)));
    await c.end();
    expect(points()).toHaveLength(MAX_METRIC_POINTS);
  });
});
