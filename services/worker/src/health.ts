/**
 * A service's health check, run by its worker beside it: an HTTP `GET` through a connection to
 * its first port, or a command in its sandbox or container, each through the same channels as
 * `trainyard ssh JOB_ID`. After `failures` unhealthy answers in a row (counted once its grace
 * has passed, or once it first answered healthy), the service is stopped, and its end reported
 * as `unhealthy` (`neverHealthy` when it never answered healthy), so the control plane starts
 * it again, or gives up on it.
 */
import type { HealthCheck, RunAttempt } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';
import { type Channel, type ChannelRequest, ChannelRequestSchema } from '@trainyard/tunnel';

/** The most of an answer (an HTTP status line, a command's output) a check reads. */
const MAX_ANSWER = 4096;
/** The most of the check and of its answer its verdict quotes: the report holds 1,024. */
const QUOTED = 200;
/** How many times a stop that failed is tried again soon, the pause before each, and then. */
const STOP_TRIES = 3;
const STOP_AGAIN_MS = 5_000;
const STOP_LATER_MS = 60_000;

export interface HealthWatch {
  /** Opens a channel beside the attempt; null where the runtime opens none. */
  open: ((request: ChannelRequest) => Promise<Channel>) | null;
  /**
   * The worker took the attempt over after a restart: its grace is taken as past, and it as
   * having been healthy (what the worker before saw of it is not known).
   */
  resumed: boolean;
  /** Stops the attempt, with its grace. */
  stop: () => Promise<void>;
  log: Pick<Logger, 'warn' | 'error'>;
}

/** Why the worker stopped a service: its health check's words, and whether it was ever healthy. */
export interface HealthVerdict {
  message: string;
  neverHealthy: boolean;
}

/** A watch on a service's health: its verdict, once it has stopped the service, and its end. */
export interface HealthWatcher {
  readonly verdict: HealthVerdict | undefined;
  end(): void;
}

/** What a service's end reports of its health: why its worker stopped it, if it did. */
export function verdictReport(watcher: HealthWatcher | undefined) {
  const verdict = watcher?.verdict;
  return verdict ? { unhealthy: verdict.message, neverHealthy: verdict.neverHealthy } : {};
}

/** At most `QUOTED` characters of `text`, whole ones, with control characters as spaces. */
function quote(text: string): string {
  const chars = Array.from(text.replace(/\p{Cc}|\p{Cs}/gu, ' '));
  return chars.length > QUOTED ? `${chars.slice(0, QUOTED).join('')}…` : chars.join('');
}

/** Watches the health of a service's attempt while it runs. */
export function watchHealth(service: RunAttempt['service'], watch: HealthWatch): HealthWatcher {
  const check = service?.health;
  const open = watch.open;
  const state: { verdict: HealthVerdict | undefined; end(): void } = {
    verdict: undefined,
    end: () => {},
  };
  if (!check || !service) return state;
  if (!open) {
    watch.log.warn('this runtime runs no health checks: the service is not watched');
    return state;
  }
  const port = service.ports[0]!;
  const startedAt = Date.now();
  let healthyOnce = watch.resumed;
  let failed = 0;
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  // A stop that fails is tried again a few times soon, then now and then until the attempt ends.
  const stop = (tries: number) => {
    watch.stop().catch((err: unknown) => {
      watch.log.error({ err }, 'could not stop the unhealthy service');
      if (ended) return;
      const wait = tries < STOP_TRIES ? STOP_AGAIN_MS : STOP_LATER_MS;
      timer = setTimeout(() => stop(tries + 1), wait);
    });
  };
  const round = async () => {
    const answer = await probe(open, check, port);
    if (ended || state.verdict) return;
    if (answer === null) {
      healthyOnce = true;
      failed = 0;
    } else if (healthyOnce || Date.now() - startedAt >= check.graceS * 1000) {
      failed += 1;
      if (failed >= check.failures) {
        state.verdict = {
          message: `its health check (${describe(check, port)}) failed ${failed} times in a row: ${quote(answer)}`,
          neverHealthy: !healthyOnce,
        };
        stop(0);
        return;
      }
    }
    timer = setTimeout(() => void round(), check.intervalS * 1000);
  };
  timer = setTimeout(() => void round(), check.intervalS * 1000);
  state.end = () => {
    ended = true;
    clearTimeout(timer);
  };
  return state;
}

function describe(check: HealthCheck, port: number): string {
  return check.http !== undefined
    ? `GET ${quote(check.http)} on port ${port}`
    : `\`${quote(check.command ?? '')}\``;
}

/** Runs the check once: null when healthy, else what was wrong. */
async function probe(
  open: NonNullable<HealthWatch['open']>,
  check: HealthCheck,
  port: number,
): Promise<string | null> {
  let channel: Channel | undefined;
  const timeout = new Promise<string>((resolve) => {
    const t = setTimeout(
      () => resolve(`no answer within ${check.timeoutS}s`),
      check.timeoutS * 1000,
    );
    t.unref();
  });
  const asked = (async () => {
    channel =
      check.http !== undefined
        ? await open({ kind: 'forward', port })
        : await open(ChannelRequestSchema.parse({ kind: 'exec', command: check.command }));
    return check.http !== undefined ? httpAnswer(channel, check.http) : commandAnswer(channel);
  })().catch((err: unknown) => (err as Error).message || String(err));
  try {
    return await Promise.race([asked, timeout]);
  } finally {
    channel?.close();
    void asked.then(() => channel?.close());
  }
}

/** Asks for `path` over the channel: healthy when the status is below 400. */
async function httpAnswer(channel: Channel, path: string): Promise<string | null> {
  channel.errors.resume();
  channel.input.on('error', () => {});
  channel.input.end(
    `GET ${path} HTTP/1.0\r\nHost: localhost\r\nUser-Agent: trainyard-health\r\nConnection: close\r\n\r\n`,
  );
  const head = await readUpTo(channel, (text) => text.includes('\r\n') || text.includes('\n'));
  if (head === '') return 'the connection was closed without an answer';
  const status = /^HTTP\/\d(?:\.\d)? (\d{3})/.exec(head);
  if (!status) return `the answer was not HTTP: ${JSON.stringify(head.split(/\r?\n/)[0])}`;
  const code = Number(status[1]);
  return code < 400 ? null : `HTTP ${code}`;
}

/** Waits for the command: healthy when it exits 0. */
async function commandAnswer(channel: Channel): Promise<string | null> {
  channel.input.on('error', () => {});
  channel.input.end();
  const [output, exit] = await Promise.all([readUpTo(channel, () => false, true), channel.exit]);
  if (exit.code === 0) return null;
  const said = output.trim().split('\n').pop();
  const how = exit.code !== null ? `exit code ${exit.code}` : `signal ${exit.signal ?? exit.error}`;
  return said ? `${how} (${said})` : how;
}

/** Reads the channel's output (and its errors, `both`) until `enough` or its end, up to a bound. */
function readUpTo(
  channel: Channel,
  enough: (text: string) => boolean,
  both = false,
): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    let open = both ? 2 : 1;
    const take = (chunk: Buffer) => {
      if (text.length < MAX_ANSWER) text += chunk.toString('utf8');
      if (enough(text)) resolve(text);
    };
    const done = () => {
      open -= 1;
      if (open === 0) resolve(text);
    };
    for (const stream of both ? [channel.output, channel.errors] : [channel.output]) {
      let over = false;
      const finish = () => {
        if (over) return;
        over = true;
        done();
      };
      stream.on('data', take);
      for (const event of ['end', 'error', 'close']) stream.once(event, finish);
    }
  });
}
