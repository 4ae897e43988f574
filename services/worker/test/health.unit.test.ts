import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RunAttempt } from '@trainyard/events';
import type { RunningAttempt } from '@trainyard/runtime';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import { verdictReport, watchHealth } from '../src/health.ts';

/** A channel whose command said `said` and exited with `code`. */
function exited(code: number, said = ''): Channel {
  const output = new PassThrough();
  const errors = new PassThrough();
  output.end(said);
  errors.end();
  return {
    input: new PassThrough(),
    output,
    errors,
    exit: Promise.resolve({ code, signal: null }),
    close: () => undefined,
    resize: () => undefined,
    signal: () => undefined,
  } as unknown as Channel;
}

const service = (command: string, failures = 2): RunAttempt['service'] => ({
  ports: [30_501],
  health: { command, intervalS: 2, timeoutS: 1, failures, graceS: 0 },
});

function proc() {
  const kill = vi.fn(async () => undefined);
  return { kill, running: { pid: 1, exited: new Promise(() => {}), kill } as RunningAttempt };
}

const log = () => ({ warn: vi.fn(), error: vi.fn() });

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe('a service’s health check', () => {
  it('stops the service after its failures in a row, saying so in words a report holds, and that it was never healthy', async () => {
    const { kill, running } = proc();
    const asked: ChannelRequest[] = [];
    const long = `test -e ${'x'.repeat(5000)}`;
    const watch = watchHealth(service(long), {
      open: async (request) => {
        asked.push(request);
        return exited(1, `${'no such file '.repeat(500)}\n`);
      },
      resumed: false,
      stop: () => running.kill(10),
      log: log(),
    });
    await vi.advanceTimersByTimeAsync(2_100);
    expect(watch.verdict).toBeUndefined();
    await vi.advanceTimersByTimeAsync(2_100);
    expect(kill).toHaveBeenCalledOnce();
    expect(asked).toHaveLength(2);
    expect(asked[0]).toMatchObject({ kind: 'exec', command: long });
    const report = verdictReport(watch);
    expect(report.neverHealthy).toBe(true);
    expect(report.unhealthy).toMatch(
      /^its health check \(`test -e x+…`\) failed 2 times in a row: exit code 1/,
    );
    expect(report.unhealthy!.length).toBeLessThan(1024);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(asked).toHaveLength(2);
  });

  it('quotes what the check said without control characters or half a character', async () => {
    const { running } = proc();
    const said = `bad\u0000thing ${'x'.repeat(176)}\u{1F600}\u{1F600}\u{1F600}`;
    const watch = watchHealth(service('false', 1), {
      open: async () => exited(1, `${said}\n`),
      resumed: false,
      stop: () => running.kill(10),
      log: log(),
    });
    await vi.advanceTimersByTimeAsync(2_100);
    const message = verdictReport(watch).unhealthy!;
    expect(message).toContain('exit code 1 (bad thing ');
    expect(message).not.toContain('\u0000');
    // Every surrogate comes as a whole pair: the quote is cut between characters.
    expect(message.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, '')).not.toMatch(/[\uD800-\uDFFF]/);
  });

  it('says it had been healthy, and counts only failures in a row', async () => {
    const { kill, running } = proc();
    const answers = [0, 1, 0, 1, 1];
    const watch = watchHealth(service('true'), {
      open: async () => exited(answers.shift() ?? 1),
      resumed: false,
      stop: () => running.kill(10),
      log: log(),
    });
    await vi.advanceTimersByTimeAsync(2_050 * 4);
    expect(kill).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(2_050);
    expect(kill).toHaveBeenCalledOnce();
    expect(verdictReport(watch)).toMatchObject({ neverHealthy: false });
  });

  it('tries a stop that failed again, and stops checking once ended', async () => {
    const kill = vi.fn(async () => {
      throw new Error('no such process');
    });
    const running = { pid: 1, exited: new Promise(() => {}), kill } as unknown as RunningAttempt;
    const logged = log();
    const watch = watchHealth(service('false', 1), {
      open: async () => exited(1),
      resumed: false,
      stop: () => running.kill(10),
      log: logged,
    });
    await vi.advanceTimersByTimeAsync(2_100);
    expect(kill).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(5_100);
    expect(kill).toHaveBeenCalledTimes(2);
    watch.end();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(kill).toHaveBeenCalledTimes(2);
    expect(logged.error).toHaveBeenCalled();
  });

  it('taken over after a worker restart, counts failures at once and does not call it never healthy', async () => {
    const { kill, running } = proc();
    const check = service('false', 2);
    check!.health!.graceS = 3600;
    const watch = watchHealth(check, {
      open: async () => exited(1),
      resumed: true,
      stop: () => running.kill(10),
      log: log(),
    });
    await vi.advanceTimersByTimeAsync(2_050 * 2);
    expect(kill).toHaveBeenCalledOnce();
    expect(verdictReport(watch)).toMatchObject({ neverHealthy: false });
  });

  it('runs nothing, and says so, where the runtime opens no channels', () => {
    const { running } = proc();
    const logged = log();
    const watch = watchHealth(service('true'), {
      open: null,
      resumed: false,
      stop: () => running.kill(10),
      log: logged,
    });
    expect(logged.warn).toHaveBeenCalledWith(
      'this runtime runs no health checks: the service is not watched',
    );
    expect(verdictReport(watch)).toEqual({});
  });
});
