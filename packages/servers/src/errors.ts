/** Why an embedded server could not start. */
export type ServerErrorCode =
  'NOT_INSTALLED' | 'UNREACHABLE_DIR' | 'PORT_IN_USE' | 'START_FAILED' | 'BAD_CONFIG';

/**
 * A server that `up` or the tests start could not be started. The message says what to do: it
 * is shown to a person as it is.
 */
export class ServerError extends Error {
  override name = 'ServerError';
  constructor(
    readonly code: ServerErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
