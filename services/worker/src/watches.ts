/** Watches on a running attempt's clock: a probe's, and a time limit's backstop. */
import { ProbeReportSchema } from '@trainyard/application';
import { readProbeReport, type RunningAttempt } from '@trainyard/runtime';

/** How often a probe's report is read while it runs, to stop its command once it is done. */
const PROBE_WATCH_MS = 250;

/** What the probe wrote in `probeDir`, if it wrote a report that reads as one. */
export function probeReportIn(probeDir: string) {
  const report = ProbeReportSchema.safeParse(readProbeReport(probeDir));
  return report.success ? report.data : null;
}

/**
 * Stops a probe's command once its wrapper says it has measured enough (what else the command
 * would run after the Python it stopped does not run), or once it runs past `deadlineMs` (a
 * time since the epoch). Returns what ends the watch.
 */
export function watchProbe(
  proc: RunningAttempt,
  opts: {
    probeDir: string;
    deadlineMs: number;
    killGraceMs: number;
    onTimedOut: () => void;
    onStopFailed: (err: unknown, why: string) => void;
  },
): () => void {
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    proc.kill(opts.killGraceMs).catch((err: unknown) => opts.onStopFailed(err, why));
  };
  const measured = setInterval(() => {
    if (probeReportIn(opts.probeDir)?.done) stop('once it had measured');
  }, PROBE_WATCH_MS);
  const limit = setTimeout(
    () => {
      opts.onTimedOut();
      stop('at its time limit');
    },
    Math.max(0, opts.deadlineMs - Date.now()),
  );
  return () => {
    clearInterval(measured);
    clearTimeout(limit);
  };
}

/** The longest a timer is set for (Node's timers hold no more): a later deadline is set again. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** How many times a stop that failed is tried again, and the pause before each. */
const STOP_TRIES = 3;
const STOP_AGAIN_MS = 5_000;

/**
 * Stops an attempt itself once it has run to `deadlineMs` (a time since the epoch): its job's
 * time limit and a margin, past which the control plane's stop has not come (it is away). A
 * stop that fails is tried again a few times. Returns what ends the watch.
 */
export function watchTimeLimit(
  kill: () => Promise<void>,
  opts: {
    deadlineMs: number;
    onReached: () => void;
    onStopFailed: (err: unknown) => void;
  },
): () => void {
  let timer: NodeJS.Timeout | undefined;
  const stop = (triesLeft: number) => {
    kill().catch((err: unknown) => {
      opts.onStopFailed(err);
      if (triesLeft > 0) timer = setTimeout(() => stop(triesLeft - 1), STOP_AGAIN_MS);
    });
  };
  const arm = () => {
    const left = opts.deadlineMs - Date.now();
    if (left > 0) {
      timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS));
      return;
    }
    opts.onReached();
    stop(STOP_TRIES);
  };
  arm();
  return () => clearTimeout(timer);
}
