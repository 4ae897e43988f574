import type { Insertable, Selectable } from 'kysely';

/** A registered SSH public key, by its fingerprint: one user's, across all users. */
export interface SshKeysTable {
  /** `SHA256:…`, as `ssh-keygen -l` prints it. */
  fingerprint: string;
  username: string;
  /** Type and base64, as an `authorized_keys` line has them, without a comment. */
  public_key: string;
  name: string;
  added_at: Date;
}
export type SshKeyRow = Selectable<SshKeysTable>;
export type NewSshKeyRow = Insertable<SshKeysTable>;
