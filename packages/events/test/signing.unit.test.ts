import { describe, expect, it } from 'vitest';
import {
  ChainVerifier,
  EventSigner,
  GENESIS_HASH,
  hashEvent,
  SignatureVerifier,
  type StoredEvent,
} from '../src/index.ts';

function signedChain(signer: EventSigner | null, n: number, aggregateId = 'alice'): StoredEvent[] {
  const events: StoredEvent[] = [];
  let prev = GENESIS_HASH;
  for (let i = 1; i <= n; i++) {
    const body = {
      id: `${aggregateId}${i}`,
      type: 'UserCreated',
      schemaVersion: 1,
      aggregate: 'user',
      aggregateId,
      occurredAt: '2026-01-01T00:00:00.000Z',
      actor: { kind: 'service', id: 't' },
      correlationId: 'c',
      causationId: null,
      prevHash: prev,
      data: { username: aggregateId, role: 'user' },
    } as const;
    const hash = hashEvent(body as never);
    const signature = signer?.sign(hash);
    events.push({ ...body, hash, seq: i, ...(signature && { signature }) } as StoredEvent);
    prev = hash;
  }
  return events;
}

const problems = (verifier: ChainVerifier) => verifier.breaks.map((b) => b.problem);

describe('signed events', () => {
  const service = EventSigner.generate();
  const trusted = new SignatureVerifier([service.publicKey]);

  it('keeps a key across export and import, with the same id and public key', () => {
    const again = EventSigner.fromPrivateKey(service.exportPrivateKey());
    expect(again.keyId).toBe(service.keyId);
    expect(again.publicKey).toBe(service.publicKey);
    expect(service.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(EventSigner.generate().keyId).not.toBe(service.keyId);
  });

  it('refuses a key that is not Ed25519 PKCS#8', () => {
    expect(() => EventSigner.fromPrivateKey('bm90IGEga2V5')).toThrow();
    expect(() => new SignatureVerifier(['bm90IGEga2V5'])).toThrow();
  });

  it('accepts a chain signed by a trusted key, and leaves hashes as they were', () => {
    const verifier = new ChainVerifier(trusted);
    for (const e of signedChain(service, 3)) verifier.add(e);
    expect(verifier.breaks).toEqual([]);
    const unsigned = signedChain(null, 3);
    expect(signedChain(service, 3).map((e) => e.hash)).toEqual(unsigned.map((e) => e.hash));
  });

  it('names an unsigned event, a foreign key and a signature that does not match', () => {
    const verifier = new ChainVerifier(trusted);
    for (const e of signedChain(null, 1, 'bob')) verifier.add(e);
    for (const e of signedChain(EventSigner.generate(), 1, 'carol')) verifier.add(e);
    const [stolen] = signedChain(service, 1, 'dave');
    const [forged] = signedChain(null, 1, 'erin');
    verifier.add({ ...forged!, signature: stolen!.signature! });
    expect(verifier.breaks.map((b) => [b.aggregateId, b.problem])).toEqual([
      ['bob', 'unsigned'],
      ['carol', 'unknown-key'],
      ['erin', 'bad-signature'],
    ]);
  });

  it('names a changed event once re-hashed, even with its chain kept whole', () => {
    const events = signedChain(service, 1);
    const changed = { ...events[0]!, data: { username: 'alice', role: 'admin' } } as StoredEvent;
    const rehashed = { ...changed, hash: hashEvent(changed) };
    const verifier = new ChainVerifier(trusted);
    verifier.add(rehashed);
    expect(problems(verifier)).toEqual(['bad-signature']);
    const resigned = new ChainVerifier(trusted);
    resigned.add({ ...rehashed, signature: EventSigner.generate().sign(rehashed.hash) });
    expect(problems(resigned)).toEqual(['unknown-key']);
  });

  it('checks chains alone when given no keys', () => {
    const verifier = new ChainVerifier();
    for (const e of signedChain(null, 2)) verifier.add(e);
    expect(verifier.breaks).toEqual([]);
  });
});
