/** Base of the errors this package throws; `code` is stable, the message is for people. */
export class EventStoreError extends Error {
  override name = 'EventStoreError';
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Someone appended to the aggregate since it was read: reload, decide again. */
export class ConcurrencyError extends EventStoreError {
  override name = 'ConcurrencyError';
  constructor(
    readonly subject: string,
    readonly expectedSeq: number,
    options?: { cause?: unknown },
  ) {
    super('CONCURRENCY_CONFLICT', `${subject} moved past sequence ${expectedSeq}`, options);
  }
}

/** The log holds something this build cannot read. */
export class CorruptEventError extends EventStoreError {
  override name = 'CorruptEventError';
  constructor(seq: number, message: string, options?: { cause?: unknown }) {
    super('CORRUPT_EVENT', `event at sequence ${seq}: ${message}`, options);
  }
}
