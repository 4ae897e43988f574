import type { AppendMeta, JobEvent } from '@trainyard/events';

/** A valid `JobSubmitted`, for tests that need a job in the log and nothing more. */
export const jobSubmitted = (owner = 'alice'): JobEvent => ({
  type: 'JobSubmitted',
  data: {
    owner,
    spec: {
      name: 'n',
      command: 'true',
      resources: { gpus: 0 },
      priority: 0,
      maxRetries: 3,
      env: {},
    },
  },
});

/** Append metadata of a test acting as a service, at `now`. */
export const testMeta = (now = new Date()): AppendMeta => ({
  actor: { kind: 'service', id: 'test' },
  now,
});
