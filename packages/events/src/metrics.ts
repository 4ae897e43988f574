/**
 * Training metrics: what a job reports of its own progress (`step`, `loss`, `accuracy`, …), by
 * printing `TRAINYARD_METRIC {json}` lines or appending JSON lines to `$TRAINYARD_METRICS_FILE`.
 * The worker that runs the attempt reads them, checks them against these limits, and publishes
 * them in batches on the metrics stream (`Subjects.attemptMetrics`); the projector keeps them.
 */
import { z } from 'zod';

/** What starts a metric line in a job's output. */
export const METRIC_PREFIX = 'TRAINYARD_METRIC ';
/** The longest line read as a metric: a longer one is skipped whole. */
export const MAX_METRIC_LINE_BYTES = 4096;
/** The most values one line may carry. */
export const MAX_METRIC_KEYS = 32;
/** The most points one attempt may report; the rest are skipped (its log keeps them). */
export const MAX_METRIC_POINTS = 20_000;
/** The greatest `step` or `epoch`: what a 32-bit column holds. */
export const MAX_METRIC_PLACE = 2 ** 31 - 1;
/** A metric's name: a letter, then letters, digits and `_ . / -` (`train/loss`, `val.acc`). */
export const METRIC_NAME = /^[A-Za-z][A-Za-z0-9_./-]{0,63}$/;

/** Where a point came from: the attempt's output, or its metrics file. */
export const MetricSource = z.enum(['output', 'file']);
export type MetricSource = z.infer<typeof MetricSource>;

export const MetricPointSchema = z.object({
  source: MetricSource,
  /** Where its line starts in its source: with the source, it names the point for good. */
  offset: z.number().int().min(0),
  /** When the worker read it. */
  at: z.string().datetime(),
  step: z.number().int().min(0).max(MAX_METRIC_PLACE).nullable(),
  epoch: z.number().int().min(0).max(MAX_METRIC_PLACE).nullable(),
  values: z
    .record(z.string().regex(METRIC_NAME), z.number().finite())
    .refine((v) => Object.keys(v).length <= MAX_METRIC_KEYS, `at most ${MAX_METRIC_KEYS} values`),
});
export type MetricPoint = z.infer<typeof MetricPointSchema>;

/** One message on the metrics stream: points of one attempt, in the order they were read. */
export const MetricBatchSchema = z.object({
  points: z.array(MetricPointSchema).min(1).max(1000),
});
export type MetricBatch = z.infer<typeof MetricBatchSchema>;

/** The fields that place a point rather than measure it. */
const PLACE_FIELDS = new Set(['step', 'epoch']);

/**
 * The point a line's JSON reports, or the reason it is not one. Numbers only: `step` and
 * `epoch` (whole and not negative) place the point, and every other field is a value.
 */
export function parseMetricJson(
  text: string,
):
  { ok: true; point: Pick<MetricPoint, 'step' | 'epoch' | 'values'> } | { ok: false; why: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, why: 'not JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, why: 'not a JSON object' };
  }
  const fields = Object.entries(parsed);
  const values: Record<string, number> = {};
  let count = 0;
  for (const [name, value] of fields) {
    if (PLACE_FIELDS.has(name)) {
      if (
        !Number.isInteger(value) ||
        (value as number) < 0 ||
        (value as number) > MAX_METRIC_PLACE
      ) {
        return { ok: false, why: `${name} must be a whole number from 0 to ${MAX_METRIC_PLACE}` };
      }
      continue;
    }
    if (!METRIC_NAME.test(name)) return { ok: false, why: `"${name.slice(0, 64)}" is not a name` };
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      return { ok: false, why: `${name} must be a finite number` };
    }
    if (++count > MAX_METRIC_KEYS) return { ok: false, why: `more than ${MAX_METRIC_KEYS} values` };
    values[name] = value;
  }
  if (count === 0) return { ok: false, why: 'no values' };
  const place = parsed as { step?: number; epoch?: number };
  return {
    ok: true,
    point: { step: place.step ?? null, epoch: place.epoch ?? null, values },
  };
}

/** What a job's metrics add up to, per name, as `GET /v1/jobs/:id/metrics` gives it. */
export interface MetricSummary {
  name: string;
  /** How many points carry it. */
  count: number;
  /** The newest value reported. */
  last: number;
  min: number;
  max: number;
  /** The greatest epoch among its points; null when none of them names one. */
  finalEpoch: number | null;
  /** The mean over the points of `finalEpoch` (over all of them when none names an epoch). */
  finalEpochMean: number;
}
