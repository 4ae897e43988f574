import { describe, expect, it } from 'vitest';
import {
  MAX_METRIC_KEYS,
  MAX_METRIC_PLACE,
  MetricBatchSchema,
  parseMetricJson,
} from '../src/index.ts';

describe('parseMetricJson', () => {
  it('takes step and epoch as the place and every other number as a value', () => {
    expect(parseMetricJson('{"step": 10, "epoch": 1, "loss": 0.5, "lr": 1e-4}')).toEqual({
      ok: true,
      point: { step: 10, epoch: 1, values: { loss: 0.5, lr: 1e-4 } },
    });
    expect(parseMetricJson('{"train/loss": 2}')).toEqual({
      ok: true,
      point: { step: null, epoch: null, values: { 'train/loss': 2 } },
    });
  });

  it.each([
    ['not json', 'not JSON'],
    ['[1,2]', 'not a JSON object'],
    ['"loss"', 'not a JSON object'],
    ['null', 'not a JSON object'],
    ['{"step": 3}', 'no values'],
    ['{"loss": "0.5"}', 'loss must be a finite number'],
    ['{"loss": null}', 'loss must be a finite number'],
    ['{"loss": 1e999}', 'loss must be a finite number'],
    ['{"step": 1.5, "loss": 1}', 'step must be a whole number'],
    ['{"step": -1, "loss": 1}', 'step must be a whole number'],
    [`{"epoch": ${MAX_METRIC_PLACE + 1}, "loss": 1}`, 'epoch must be a whole number'],
    ['{"__proto__": 1}', '"__proto__" is not a name'],
    ['{"a b": 1}', '"a b" is not a name'],
    ['{"": 1}', '"" is not a name'],
  ])('refuses %s', (text, why) => {
    const parsed = parseMetricJson(text);
    expect(parsed.ok).toBe(false);
    expect(parsed.ok ? '' : parsed.why).toContain(why);
  });

  it(`takes at most ${MAX_METRIC_KEYS} values`, () => {
    const fields = (n: number) =>
      JSON.stringify(Object.fromEntries(Array.from({ length: n }, (_, i) => [`m${i}`, i])));
    expect(parseMetricJson(fields(MAX_METRIC_KEYS)).ok).toBe(true);
    expect(parseMetricJson(fields(MAX_METRIC_KEYS + 1))).toEqual({
      ok: false,
      why: `more than ${MAX_METRIC_KEYS} values`,
    });
  });

  it('makes points the batch schema takes, and the schema refuses what the parser does', () => {
    const parsed = parseMetricJson('{"step": 1, "loss": 0.25}');
    if (!parsed.ok) throw new Error(parsed.why);
    const point = { source: 'output', offset: 0, at: new Date().toISOString(), ...parsed.point };
    expect(MetricBatchSchema.safeParse({ points: [point] }).success).toBe(true);
    const bad = { ...point, values: { 'a b': 1 } };
    expect(MetricBatchSchema.safeParse({ points: [bad] }).success).toBe(false);
    expect(MetricBatchSchema.safeParse({ points: [] }).success).toBe(false);
  });
});
