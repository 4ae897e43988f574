import { z } from 'zod';
import type { SessionTimers } from '@trainyard/events';
import { ApiError } from './errors.ts';

const minutes = (fallback: number, most: number) =>
  z.coerce.number().int().min(1).max(most).default(fallback);

/**
 * What the API reads from the environment for sessions, once, at start-up: the timers a session
 * gets when it asks for none, the most it may ask for, how long a one-time SSH password lasts,
 * and where users reach the SSH gateway.
 */
export const SessionConfigSchema = z
  .object({
    TRAINYARD_SESSION_CONNECT_MIN: minutes(10, 10_080),
    TRAINYARD_SESSION_IDLE_MIN: minutes(30, 10_080),
    TRAINYARD_SESSION_MAX_MIN: minutes(360, 43_200),
    TRAINYARD_SESSION_CONNECT_CAP_MIN: minutes(60, 10_080),
    TRAINYARD_SESSION_IDLE_CAP_MIN: minutes(240, 10_080),
    TRAINYARD_SESSION_MAX_CAP_MIN: minutes(1440, 43_200),
    TRAINYARD_SSH_PASSWORD_TTL_S: z.coerce.number().int().min(10).max(86_400).default(300),
    /** The host name users reach the gateway at; unset, the one they reached the API at. */
    TRAINYARD_SSH_HOST: z.string().min(1).optional(),
    TRAINYARD_SSH_PORT: z.coerce.number().int().min(1).max(65_535).default(2222),
  })
  .superRefine((c, ctx) => {
    for (const timer of ['CONNECT', 'IDLE', 'MAX'] as const) {
      const fallback = c[`TRAINYARD_SESSION_${timer}_MIN`];
      const cap = c[`TRAINYARD_SESSION_${timer}_CAP_MIN`];
      if (fallback > cap) {
        ctx.addIssue({
          code: 'custom',
          path: [`TRAINYARD_SESSION_${timer}_MIN`],
          message: `${fallback} is above its cap TRAINYARD_SESSION_${timer}_CAP_MIN (${cap})`,
        });
      }
    }
  });
export type SessionConfig = z.infer<typeof SessionConfigSchema>;

/** The timers a session gets when it asks for none, and the most it may ask for. */
export interface SessionTimerPolicy {
  defaults: SessionTimers;
  caps: SessionTimers;
}

/** The timer policy the configuration sets. */
export function timerPolicy(c: SessionConfig): SessionTimerPolicy {
  return {
    defaults: {
      connectMin: c.TRAINYARD_SESSION_CONNECT_MIN,
      idleMin: c.TRAINYARD_SESSION_IDLE_MIN,
      maxMin: c.TRAINYARD_SESSION_MAX_MIN,
    },
    caps: {
      connectMin: c.TRAINYARD_SESSION_CONNECT_CAP_MIN,
      idleMin: c.TRAINYARD_SESSION_IDLE_CAP_MIN,
      maxMin: c.TRAINYARD_SESSION_MAX_CAP_MIN,
    },
  };
}

const CAP_VARIABLE: Record<keyof SessionTimers, string> = {
  connectMin: 'TRAINYARD_SESSION_CONNECT_CAP_MIN',
  idleMin: 'TRAINYARD_SESSION_IDLE_CAP_MIN',
  maxMin: 'TRAINYARD_SESSION_MAX_CAP_MIN',
};

/**
 * The timers in force for a new session: each one asked for, or the default; one asked for
 * above its cap is refused (400) rather than lowered, so that nobody learns of it only when
 * their session stops early.
 */
export function timersInForce(
  asked: Partial<SessionTimers>,
  policy: SessionTimerPolicy,
): SessionTimers {
  const timers = { ...policy.defaults };
  for (const key of Object.keys(CAP_VARIABLE) as (keyof SessionTimers)[]) {
    const value = asked[key];
    if (value === undefined) continue;
    const cap = policy.caps[key];
    if (value > cap) {
      throw new ApiError(
        'VALIDATION_FAILED',
        `timers.${key}: at most ${cap} minutes, this cluster's cap (${CAP_VARIABLE[key]})`,
        [{ field: `timers.${key}`, message: `at most ${cap}` }],
      );
    }
    timers[key] = value;
  }
  return timers;
}
