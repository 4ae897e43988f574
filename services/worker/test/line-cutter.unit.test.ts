import { describe, expect, it } from 'vitest';
import { MAX_METRIC_LINE_BYTES } from '@trainyard/events';
import { LineCutter } from '../src/line-cutter.ts';

function cut(chunks: (string | Buffer)[], prefix?: string) {
  const lines: [string, number][] = [];
  let skipped = 0;
  const cutter = new LineCutter((line, offset) => lines.push([line, offset]), {
    ...(prefix !== undefined && { prefix: Buffer.from(prefix) }),
    onSkip: () => skipped++,
  });
  for (const chunk of chunks) cutter.write(Buffer.from(chunk));
  return { lines, skipped, cutter };
}

describe('LineCutter', () => {
  it('hands over whole lines with where each starts, across chunks', () => {
    expect(cut(['ab', 'c\nde\n', 'f', '\n', 'partial']).lines).toEqual([
      ['abc', 0],
      ['de', 4],
      ['f', 7],
    ]);
  });

  it('ends a line at a carriage return too, as a progress bar redraws', () => {
    expect(cut(['M {"a":1}\r\n 50%|##   |\rM {"b":2}\n'], 'M ').lines).toEqual([
      ['{"a":1}', 0],
      ['{"b":2}', 23],
    ]);
  });

  it('keeps only lines that start with the prefix, without it', () => {
    const { lines } = cut(['epoch 1\nM {"a":1}\n', 'xM {"b":2}\nM', ' {"c":3}\nM \n'], 'M ');
    expect(lines).toEqual([
      ['{"a":1}', 8],
      ['{"c":3}', 29],
    ]);
  });

  it('skips a line longer than the limit whole, however it is cut, and counts it if it was meant as one', () => {
    const long = 'x'.repeat(MAX_METRIC_LINE_BYTES + 1);
    const plain = cut([long.slice(0, 10), long.slice(10), '\nok\n']);
    expect(plain.lines).toEqual([['ok', MAX_METRIC_LINE_BYTES + 2]]);
    expect(plain.skipped).toBe(1);
    const meant = cut([`M ${long}\n`, `other ${long}\n`, 'M {}\n'], 'M ');
    expect(meant.lines).toEqual([['{}', 2 * long.length + 10]]);
    expect(meant.skipped).toBe(1);
  });

  it('keeps its own copy of a line under way, whatever its caller does with the buffer', () => {
    const lines: string[] = [];
    const cutter = new LineCutter((line) => lines.push(line));
    const buffer = Buffer.from('first half');
    cutter.write(buffer);
    buffer.write('XXXXXXXXXX');
    cutter.write(Buffer.from(', second\n'));
    expect(lines).toEqual(['first half, second']);
  });

  it('goes on from a place inside a line by skipping the rest of it', () => {
    const { lines, cutter } = cut(['first\nsecond, cut']);
    cutter.moveTo(50, true);
    cutter.write(Buffer.from(' short\nnext\n'));
    expect(lines).toEqual([
      ['first', 0],
      ['next', 57],
    ]);
    cutter.moveTo(100, false);
    cutter.write(Buffer.from('line\n'));
    expect(lines.at(-1)).toEqual(['line', 100]);
    expect(cutter.lineStart).toBe(105);
  });
});
