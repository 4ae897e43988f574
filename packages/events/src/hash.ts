import { createHash } from 'node:crypto';
import type { Envelope } from './envelope.ts';
import { GENESIS_HASH } from './envelope.ts';
import type { SignatureProblem, SignatureVerifier } from './signing.ts';

/** JSON with object keys sorted at every depth, so equal values hash equally. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** The hash of an event: sha256 over its predecessor's hash and its canonical form. */
export function hashEvent(event: Omit<Envelope, 'hash'> & { hash?: string; seq?: number }): string {
  const { hash: _hash, seq: _seq, signature: _signature, ...body } = event;
  return createHash('sha256').update(body.prevHash).update(canonicalJson(body)).digest('hex');
}

export interface ChainBreak {
  aggregate: string;
  aggregateId: string;
  eventId: string;
  seq: number;
  /**
   * `hash-mismatch`: the event is not what was hashed. `prev-hash-mismatch`: it follows an event
   * the chain does not hold. `fork`: it follows an earlier event of its chain than the newest,
   * so two events were accepted at one position; nats-server before 2.9.21 can do that for
   * concurrent appends to a clustered stream (nats-server#4320). `unsigned`, `unknown-key` and
   * `bad-signature`: the event was not signed by an identity the verifier trusts (checked only
   * when it was given keys): appended by hand, forged, or signed again after a change.
   */
  problem: 'prev-hash-mismatch' | 'hash-mismatch' | 'fork' | SignatureProblem;
}

/** Walks events in log order and reports every place where a per-aggregate chain breaks. */
export class ChainVerifier {
  /** With `signatures`, every event must also be signed by a key it trusts. */
  constructor(private readonly signatures: SignatureVerifier | null = null) {}

  readonly #heads = new Map<string, string>();
  /** Every hash seen per chain, shortened: enough to tell a fork from a missing link. */
  readonly #seen = new Map<string, Set<string>>();
  readonly breaks: ChainBreak[] = [];
  count = 0;

  add(event: Envelope & { seq: number }): void {
    this.count++;
    const key = `${event.aggregate}.${event.aggregateId}`;
    const expectedPrev = this.#heads.get(key) ?? GENESIS_HASH;
    const where = {
      aggregate: event.aggregate,
      aggregateId: event.aggregateId,
      eventId: event.id,
      seq: event.seq,
    };
    const seen = this.#seen.get(key) ?? new Set([GENESIS_HASH.slice(0, 16)]);
    this.#seen.set(key, seen);
    if (event.prevHash !== expectedPrev) {
      const fork = seen.has(event.prevHash.slice(0, 16));
      this.breaks.push({ ...where, problem: fork ? 'fork' : 'prev-hash-mismatch' });
    }
    if (hashEvent(event) !== event.hash) this.breaks.push({ ...where, problem: 'hash-mismatch' });
    const unsigned = this.signatures?.check(event);
    if (unsigned) this.breaks.push({ ...where, problem: unsigned });
    this.#heads.set(key, event.hash);
    seen.add(event.hash.slice(0, 16));
  }

  get aggregates(): number {
    return this.#heads.size;
  }
}
