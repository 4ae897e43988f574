import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
const RANDOM_CHARS = 12;

/** Random bytes drawn from the system in blocks: one draw per call costs more than the id. */
const pool = Buffer.alloc(RANDOM_CHARS * 256);
let poolOffset = pool.length;

function randomChars(): string {
  if (poolOffset + RANDOM_CHARS > pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  let chars = '';
  for (let i = 0; i < RANDOM_CHARS; i++) chars += ALPHABET[pool[poolOffset + i]! % 32];
  poolOffset += RANDOM_CHARS;
  return chars;
}

/** A sortable, subject-safe id: a prefix, 10 chars of time, 12 chars of randomness. */
export function newId(prefix: string, now = Date.now()): string {
  let time = '';
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32]! + time;
    t = Math.floor(t / 32);
  }
  return `${prefix}_${time}${randomChars()}`;
}
