import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { SshKeyRow } from '../tables/ssh-keys.table.ts';
import type { TableProjector } from './types.ts';

/**
 * A key belongs to the first user who registered it. The API refuses a key already registered,
 * but two users adding one key at the same instant could both be accepted; the first keeps it
 * here, and the other's later removal leaves it alone.
 */
function step(row: SshKeyRow | undefined, event: StoredEvent): SshKeyRow | null | undefined {
  if (!ofAggregate(event, 'user')) return undefined;
  switch (event.type) {
    case 'UserSshKeyAdded':
      if (row) return undefined;
      return {
        fingerprint: event.data.fingerprint,
        username: event.aggregateId,
        public_key: event.data.publicKey,
        name: event.data.name,
        added_at: new Date(event.occurredAt),
      };
    case 'UserSshKeyRemoved':
      return row && row.username === event.aggregateId ? null : undefined;
    default:
      return undefined;
  }
}

const isKeyEvent = (event: StoredEvent) =>
  event.aggregate === 'user' &&
  (event.type === 'UserSshKeyAdded' || event.type === 'UserSshKeyRemoved');

/** One row per registered SSH key, from its user's events. */
export const sshKeysProjector: TableProjector<'ssh_keys'> = {
  table: 'ssh_keys',
  primaryKey: 'fingerprint',
  jsonColumns: [],
  keyOf: (event) =>
    isKeyEvent(event) ? (event.data as { fingerprint: string }).fingerprint : null,
  apply: step,
};
