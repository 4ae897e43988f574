import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** A sortable, subject-safe id: a prefix, 10 chars of time, 12 chars of randomness. */
export function newId(prefix: string, now = Date.now()): string {
  let time = '';
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32]! + time;
    t = Math.floor(t / 32);
  }
  const rand = randomBytes(12);
  let tail = '';
  for (const byte of rand) tail += ALPHABET[byte % 32];
  return `${prefix}_${time}${tail}`;
}
