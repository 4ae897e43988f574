import { runChaos } from './chaos.ts';

process.env.TRAINYARD_LOG_LEVEL ??= 'error';
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};

const report = await runChaos({
  jobs: arg('jobs', 300),
  workers: arg('workers', 3),
  killEveryMs: arg('kill-every-ms', 1_500),
  kills: arg('kills', 60),
  timeoutMs: arg('timeout-ms', 300_000),
  log: (line) => console.log(`[chaos] ${line}`),
});
console.log(`
Trainyard chaos run
  jobs                 ${report.jobs}: ${report.succeeded} succeeded, ${report.failed} failed, ${report.notTerminal} not terminal
  stuck at             ${JSON.stringify(report.stuckAt)}
  kills (kill -9)      ${Object.entries(report.kills)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ')}
  crashes              ${report.crashes}
  overlapping attempts ${report.overlappingAttempts}
  events               ${report.events}, broken hash chains ${report.brokenChains}, forks ${report.forkedChains} (nats-server ${report.natsServer})
  projections          ${report.projectionsEqualRebuild ? 'equal to a rebuild from the log' : 'DIFFER from a rebuild'}
  took                 ${(report.durationMs / 1000).toFixed(1)} s
  verdict              ${report.ok ? 'OK' : 'FAILED'}`);
if (report.diagnosis) console.log(JSON.stringify(report.diagnosis, null, 2));
process.exit(report.ok ? 0 : 1);
