import { describe, expect, it } from 'vitest';
import { ConfigError, parseEnv } from '@trainyard/service-kit';
import { SessionConfigSchema, timerPolicy, timersInForce } from '../src/session-config.ts';

describe('session timers', () => {
  const policy = timerPolicy(parseEnv(SessionConfigSchema, {}));

  it('defaults to 10, 30 and 360 minutes, capped at 60, 240 and 1440', () => {
    expect(policy).toEqual({
      defaults: { connectMin: 10, idleMin: 30, maxMin: 360 },
      caps: { connectMin: 60, idleMin: 240, maxMin: 1440 },
    });
  });

  it('takes each timer asked for up to its cap, and the default for the rest', () => {
    expect(timersInForce({ idleMin: 240, maxMin: 20 }, policy)).toEqual({
      connectMin: 10,
      idleMin: 240,
      maxMin: 20,
    });
  });

  it('refuses a timer above its cap, naming the cap and the setting', () => {
    expect(() => timersInForce({ connectMin: 61 }, policy)).toThrow(
      "timers.connectMin: at most 60 minutes, this cluster's cap (TRAINYARD_SESSION_CONNECT_CAP_MIN)",
    );
  });

  it('reads the operator’s settings, and refuses a default above its cap', () => {
    const env = { TRAINYARD_SESSION_IDLE_MIN: '90', TRAINYARD_SESSION_IDLE_CAP_MIN: '120' };
    expect(timerPolicy(parseEnv(SessionConfigSchema, env)).defaults.idleMin).toBe(90);
    expect(() => parseEnv(SessionConfigSchema, { TRAINYARD_SESSION_MAX_MIN: '2000' })).toThrow(
      ConfigError,
    );
    expect(() => parseEnv(SessionConfigSchema, { TRAINYARD_SESSION_MAX_MIN: '2000' })).toThrow(
      'above its cap TRAINYARD_SESSION_MAX_CAP_MIN (1440)',
    );
  });
});
