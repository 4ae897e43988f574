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

export const UserEventSchema = z.discriminatedUnion('type', [
  UserCreated,
  UserPasswordChanged,
  UserDisabled,
]);
export type UserEvent = z.infer<typeof UserEventSchema>;
