import { z } from 'zod';

/** Who caused an event: a user (by name) or a Trainyard service (by its instance id). */
export const ActorSchema = z.object({
  kind: z.enum(['user', 'service']),
  id: z.string().min(1),
});
export type Actor = z.infer<typeof ActorSchema>;

/** The two kinds of failure. A user failure is the job's own doing; a system failure is ours. */
export const FailureKind = { user: 'user', system: 'system' } as const;
export type FailureKind = (typeof FailureKind)[keyof typeof FailureKind];

/** Why an attempt or a build failed. `reason` is a stable code, `message` is for people. */
export const FailureSchema = z.object({
  kind: z.enum(['user', 'system']),
  reason: z.string().min(1),
  message: z.string(),
  retryable: z.boolean(),
});
export type Failure = z.infer<typeof FailureSchema>;

/** A file kept in the blob store, addressed by key. */
export const BlobRefSchema = z.object({
  key: z.string().min(1),
  sizeBytes: z.number().int().nonnegative(),
  sha256: z.string().length(64),
});
export type BlobRef = z.infer<typeof BlobRefSchema>;

/** A login through the SSH gateway, accepted or refused, as the gateway recorded it. */
export const SshLoginSchema = z.object({
  /** Who tried: the owner, another user, or `null` for a password that named no one. */
  user: z.string().min(1).nullable(),
  method: z.enum(['password', 'publickey']),
  accepted: z.boolean(),
  /** Why a login was refused: a stable code. */
  reason: z.string().min(1).max(64).optional(),
  /** Where it came from: the client's address as the gateway saw it. */
  source: z.string().max(64),
});
export type SshLogin = z.infer<typeof SshLoginSchema>;
