import { describe, expect, it } from 'vitest';
import {
  formatDuration,
  JobSpecSchema,
  MAX_TIME_LIMIT_SECONDS,
  parseDuration,
} from '../src/index.ts';

const base = { name: 'train', command: 'true', resources: { gpus: 0 } };
const limitOf = (timeLimit: unknown) => JobSpecSchema.safeParse({ ...base, timeLimit });

describe('a job spec’s time limit', () => {
  it('takes whole seconds or a duration, and keeps seconds', () => {
    const cases: [unknown, number][] = [
      [90, 90],
      ['90s', 90],
      ['45m', 2700],
      ['2h', 7200],
      ['1h30m', 5400],
      ['1d', 86_400],
      [' 1d2h3m4s ', 93_784],
      ['30d', MAX_TIME_LIMIT_SECONDS],
    ];
    for (const [input, seconds] of cases) {
      const parsed = limitOf(input);
      expect(parsed.success && parsed.data.timeLimit).toBe(seconds);
    }
    const stored = JobSpecSchema.parse({ ...base, timeLimit: '2h' });
    expect(JobSpecSchema.parse(stored).timeLimit).toBe(7200);
    expect(JobSpecSchema.parse(base).timeLimit).toBeUndefined();
  });

  it('refuses what is not a duration, a zero, a fraction and more than 30 days, saying what it takes', () => {
    for (const bad of [
      '',
      '2 hours',
      '1.5h',
      'h',
      '-5',
      '0s',
      0,
      1.5,
      -3,
      '31d',
      MAX_TIME_LIMIT_SECONDS + 1,
      true,
    ]) {
      const parsed = limitOf(bad);
      expect(parsed.success, `${JSON.stringify(bad)} should be refused`).toBe(false);
      expect(parsed.error?.issues[0]?.path).toEqual(['timeLimit']);
    }
    expect(limitOf('soon').error?.issues[0]?.message).toContain('such as 90s, 45m, 2h');
  });

  it('reads back what it writes', () => {
    for (const seconds of [1, 59, 60, 90, 3600, 5400, 86_400, 93_784, MAX_TIME_LIMIT_SECONDS]) {
      expect(parseDuration(formatDuration(seconds))).toBe(seconds);
    }
    expect(formatDuration(5400)).toBe('1h30m');
    expect(Number.isNaN(parseDuration('1x'))).toBe(true);
  });
});
