/** A command the current state does not allow. `code` is stable; the API maps it to a status. */
export class DomainError extends Error {
  override name = 'DomainError';
  constructor(
    readonly code: DomainErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export const DomainErrorCode = {
  jobExists: 'JOB_EXISTS',
  jobNotFound: 'JOB_NOT_FOUND',
  jobFinished: 'JOB_FINISHED',
  heldByAdmin: 'HELD_BY_ADMIN',
  invalidTransition: 'INVALID_TRANSITION',
  staleAttempt: 'STALE_ATTEMPT',
  sessionExists: 'SESSION_EXISTS',
  sessionNotFound: 'SESSION_NOT_FOUND',
  sessionEnded: 'SESSION_ENDED',
  staleRun: 'STALE_RUN',
  teamExists: 'TEAM_EXISTS',
  teamNotFound: 'TEAM_NOT_FOUND',
} as const;
export type DomainErrorCode = (typeof DomainErrorCode)[keyof typeof DomainErrorCode];

/** For the `default` branch of a switch that has handled every case. */
export function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}
