/** Headers on log messages (`ty.log.<jobId>.<attempt>`); attempt 0 holds the build's output. */
export const LogHeaders = {
  stream: 'Ty-Stream',
  /** Marks the last message of an attempt's log. */
  eof: 'Ty-Eof',
} as const;
