import type { Command } from 'commander';
import type { MetricSummary } from '@trainyard/events';
import { ApiClient, CliError } from '../client.ts';
import { wholeNumber } from './flags.ts';
import { printJson, printTable } from './table.ts';

interface MetricPoint {
  seq: string;
  attempt: number;
  source: 'output' | 'file';
  at: string;
  step: number | null;
  epoch: number | null;
  values: Record<string, number>;
}

interface JobMetrics {
  jobId: string;
  summary: MetricSummary[];
  /** An array job's: each shard's summary. */
  shards?: { jobId: string; summary: MetricSummary[] }[];
  points: MetricPoint[];
  next: string | null;
}

/** A value as people read it: six significant digits at most. */
const shown = (n: number) => String(Number(n.toPrecision(6)));

const summaryRow = (s: MetricSummary) => [
  s.name,
  String(s.count),
  shown(s.last),
  shown(s.min),
  shown(s.max),
  s.finalEpoch === null ? '-' : String(s.finalEpoch),
  shown(s.finalEpochMean),
];

/** Every point of a job, page by page. */
async function allPoints(
  client: ApiClient,
  base: string,
  first: JobMetrics,
): Promise<MetricPoint[]> {
  const points = [...first.points];
  for (let next = first.next; next !== null;) {
    const page = await client.json<JobMetrics>(`${base}&after=${next}`);
    points.push(...page.points);
    next = page.next;
  }
  return points;
}

/** A job's training metrics. */
export function registerMetricsCommand(program: Command): void {
  program
    .command('metrics')
    .description(
      'a job’s training metrics (TRAINYARD_METRIC lines, $TRAINYARD_METRICS_FILE): last, min, max and the final epoch’s mean; --points: each point',
    )
    .argument('<id>')
    .option('--points', 'list every point, in the order they arrived')
    .option('--attempt <n>', 'with --points: one attempt’s only')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { points?: boolean; attempt?: string; json?: boolean }) => {
      const attempt = wholeNumber('--attempt', o.attempt);
      if (attempt !== undefined && !o.points) throw new CliError('--attempt goes with --points');
      if (attempt !== undefined && (!Number.isInteger(attempt) || attempt < 1))
        throw new CliError('--attempt wants an attempt number, 1 or more');
      const client = ApiClient.fromEnv();
      const base = `/v1/jobs/${encodeURIComponent(id)}/metrics?limit=${o.points ? 5000 : 0}${attempt === undefined ? '' : `&attempt=${attempt}`}`;
      const first = await client.json<JobMetrics>(base);
      if (first.shards && o.points)
        throw new CliError(
          `${id} is an array job: its points are each shard’s (trainyard metrics ${id}_0 --points)`,
        );
      const points = o.points ? await allPoints(client, base, first) : [];
      if (o.json) return printJson({ ...first, points, next: null });
      if (first.summary.length === 0) {
        console.log(`${id} has reported no metrics`);
        return;
      }
      if (o.points) {
        printTable(
          ['ATTEMPT', 'STEP', 'EPOCH', 'VALUES'],
          points.map((p) => [
            String(p.attempt),
            p.step === null ? '-' : String(p.step),
            p.epoch === null ? '-' : String(p.epoch),
            Object.entries(p.values)
              .map(([k, v]) => `${k}=${shown(v)}`)
              .join(' '),
          ]),
        );
        return;
      }
      const columns = ['NAME', 'POINTS', 'LAST', 'MIN', 'MAX', 'FINAL EPOCH', 'FINAL MEAN'];
      if (first.shards) console.log(`all ${first.shards.length} shards that reported:`);
      printTable(columns, first.summary.map(summaryRow));
      if (!first.shards) return;
      console.log('');
      printTable(
        ['SHARD', ...columns],
        first.shards.flatMap(({ jobId, summary }) => summary.map((s) => [jobId, ...summaryRow(s)])),
      );
    });
}
