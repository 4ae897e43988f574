import { describe, expect, it } from 'vitest';
import type { SessionEvent, UserEvent } from '@trainyard/events';
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

describe('the gateway’s directory of users and sessions', () => {
  it('ends a disabled user’s connections, and refuses the user from then on', () => {
    const d = new Directory();
    expect(d.apply(userEvent('bob', { type: 'UserDisabled', data: { reason: '' } }))).toEqual({
      user: 'bob',
      message: 'trainyard: your account was disabled.',
    });
    expect(d.disabled('bob')).toBe(true);
    expect(d.disabled('alice')).toBe(false);
  });

  it('does not bring back a session it never saw requested (a login recorded as it ended)', () => {
    const d = new Directory();
    const login: SessionEvent = {
      type: 'SessionLogin',
      data: { user: null, method: 'password', accepted: false, source: '10.0.0.1' },
    };
    expect(
      d.apply(storedEvent('session', 'ses_gone', login, { seq: ++seq, at: new Date() })),
    ).toBeNull();
    expect(d.session('ses_gone')).toBeNull();
  });
});
