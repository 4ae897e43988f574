import { describe, expect, it } from 'vitest';
import { cleanLog, cleanName, safeJson } from '../src/output.ts';

describe('text from the server on a terminal', () => {
  it('drops escape sequences, controls and bidirectional overrides from names', () => {
    expect(cleanName('train\x1b[2J\x1b[31mred\x1b[0m')).toBe('trainred');
    expect(cleanName('invoice\u202Egpj.exe')).toBe('invoicegpj.exe');
    expect(cleanName('a\nb\tc\u200Bd\x07')).toBe('abcd');
    expect(cleanName('\x1b]0;owned title\x07job')).toBe('job');
    expect(cleanName('résumé 学习')).toBe('résumé 学习');
  });

  it('keeps the lines and tabs of a log, and a CRLF, but not a lone carriage return', () => {
    expect(cleanLog('epoch 1\tloss 0.3\r\nepoch 2\n')).toBe('epoch 1\tloss 0.3\r\nepoch 2\n');
    expect(cleanLog('visible\rhidden over it\n')).toBe('visiblehidden over it\n');
    expect(cleanLog('\x1b[1;32mok\x1b[0m \u2066x\u2069\n')).toBe('ok x\n');
  });

  it('escapes invisible characters in JSON, which stays the same value', () => {
    const text = safeJson({ name: 'a\u202Eb\u2028c\x9bd' });
    expect(text).toContain('a\\u202eb\\u2028c\\u009bd');
    expect(JSON.parse(text)).toEqual({ name: 'a\u202Eb\u2028c\x9bd' });
  });
});
