import { describe, expect, it } from 'vitest';
import type { UserEvent } from '@trainyard/events';
import { storedEvent } from '@trainyard/testkit';
import { Directory } from '../src/directory.ts';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN26/Qjwk2tYUDLuKXdAL1OBKSyPK8lrweOwynmmnSeV';
const FINGERPRINT = 'SHA256:' + 'A'.repeat(43);
const blob = Buffer.from(KEY.split(' ')[1]!, 'base64');
let seq = 0;
const userEvent = (user: string, event: UserEvent) =>
  storedEvent('user', user, event, { seq: ++seq, at: new Date('2026-01-01T00:00:00Z') });
const added = (user: string) =>
  userEvent(user, {
    type: 'UserSshKeyAdded',
    data: { fingerprint: FINGERPRINT, publicKey: KEY, name: 'k' },
  });
const removed = (user: string) =>
  userEvent(user, { type: 'UserSshKeyRemoved', data: { fingerprint: FINGERPRINT } });

describe('the gateway’s directory of keys', () => {
  it('gives a key to whoever registered it first, as the read model does', () => {
    const d = new Directory();
    d.apply(added('alice'));
    d.apply(added('mallory'));
    expect(d.keyOwner(blob)).toBe('alice');
    d.apply(removed('mallory'));
    expect(d.keyOwner(blob)).toBe('alice');
    d.apply(removed('alice'));
    expect(d.keyOwner(blob)).toBeNull();
  });
});
