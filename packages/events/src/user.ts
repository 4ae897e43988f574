/**
 * User events. Credentials are secrets and never enter the event log; they live in the
 * credentials bucket. The log only records that a user exists and what role it has.
 */
import { z } from 'zod';

export const Role = { admin: 'admin', user: 'user' } as const;
export type Role = (typeof Role)[keyof typeof Role];

export const USERNAME = /^[a-z][a-z0-9_-]{1,31}$/;

export const UserCreated = z.object({
  type: z.literal('UserCreated'),
  data: z.object({ username: z.string().regex(USERNAME), role: z.enum(['admin', 'user']) }),
});

/** The password was changed (by its owner); the hash itself stays out of the log. */
export const UserPasswordChanged = z.object({
  type: z.literal('UserPasswordChanged'),
  data: z.object({}),
});

/** An admin disabled the user: it may no longer log in, and its sessions end. */
export const UserDisabled = z.object({
  type: z.literal('UserDisabled'),
  data: z.object({ reason: z.string().max(512).default('') }),
});

/** An OpenSSH public key line's fingerprint, as `ssh-keygen -l` prints it: `SHA256:…`. */
export const SSH_FINGERPRINT = /^SHA256:[A-Za-z0-9+/]{43}$/;

/**
 * The user registered a public key for logging in to their sessions through the gateway. A
 * public key is no secret: the log keeps it whole, and the gateway reads it from there.
 */
export const UserSshKeyAdded = z.object({
  type: z.literal('UserSshKeyAdded'),
  data: z.object({
    fingerprint: z.string().regex(SSH_FINGERPRINT),
    /** The key as an OpenSSH `authorized_keys` line has it: type and base64, no comment. */
    publicKey: z.string().min(1).max(16_384),
    /** The key's comment, or the name the user gave it. */
    name: z.string().max(256),
  }),
});

export const UserSshKeyRemoved = z.object({
  type: z.literal('UserSshKeyRemoved'),
  data: z.object({ fingerprint: z.string().regex(SSH_FINGERPRINT) }),
});

/** The most GPUs a quota may name: more than any cluster holds. */
export const MAX_QUOTA_GPUS = 100_000;

/**
 * An admin set what the user's jobs and sessions may hold at once: at most `maxGpus` GPUs
 * between them (null: no limit). Work that would go over it waits, queued, until some ends.
 */
export const UserQuotaSet = z.object({
  type: z.literal('UserQuotaSet'),
  data: z.object({ maxGpus: z.number().int().min(0).max(MAX_QUOTA_GPUS).nullable() }),
});

/** The most GPU-hours a quota may name. */
export const MAX_QUOTA_GPU_HOURS = 100_000_000;

/** A quota of GPU-hours a calendar month (UTC): a number of hours, or null for none. */
export const GpuHoursQuota = z.number().min(0).max(MAX_QUOTA_GPU_HOURS).nullable();

/**
 * An admin set the GPU-hours the user's jobs and sessions may take each calendar month (UTC):
 * once their work has taken that many (ended and running work counted), what would take more
 * waits, queued, until the next month (null: no limit).
 */
export const UserGpuHoursQuotaSet = z.object({
  type: z.literal('UserGpuHoursQuotaSet'),
  data: z.object({ maxGpuHours: GpuHoursQuota }),
});

export const UserEventSchema = z.discriminatedUnion('type', [
  UserCreated,
  UserPasswordChanged,
  UserDisabled,
  UserSshKeyAdded,
  UserSshKeyRemoved,
  UserQuotaSet,
  UserGpuHoursQuotaSet,
]);
export type UserEvent = z.infer<typeof UserEventSchema>;
