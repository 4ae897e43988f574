import { DomainError } from '@trainyard/domain';
import { ConcurrencyError, EventStoreError } from '@trainyard/events';
import { ArchiveError } from '@trainyard/blobs';
import {
  hasZodFastifySchemaValidationErrors,
  ResponseSerializationError,
} from 'fastify-type-provider-zod';
import { ZodError } from 'zod';

/** An error the API answers with; `code` is stable, the status comes from `STATUS_BY_CODE`. */
export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly code: keyof typeof STATUS_BY_CODE,
    message: string,
    readonly details?: unknown,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Every error code the API can answer, and its HTTP status. */
export const STATUS_BY_CODE = {
  VALIDATION_FAILED: 400,
  BAD_ARCHIVE: 400,
  UNSATISFIABLE: 400,
  UNAUTHENTICATED: 401,
  TOKEN_EXPIRED: 401,
  TOKEN_REVOKED: 401,
  FORBIDDEN: 403,
  HELD_BY_ADMIN: 403,
  ACCOUNT_DISABLED: 403,
  ENROLMENT_REFUSED: 403,
  NOT_FOUND: 404,
  JOB_NOT_FOUND: 404,
  WORKER_NOT_FOUND: 404,
  SESSION_NOT_FOUND: 404,
  TEAM_NOT_FOUND: 404,
  USER_EXISTS: 409,
  TEAM_EXISTS: 409,
  JOB_EXISTS: 409,
  WORKER_EXISTS: 409,
  JOB_FINISHED: 409,
  SESSION_EXISTS: 409,
  SESSION_ENDED: 409,
  STALE_RUN: 409,
  SSH_KEY_EXISTS: 409,
  INVALID_TRANSITION: 409,
  STALE_ATTEMPT: 409,
  CONCURRENCY_CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  TOO_MANY_LOGIN_ATTEMPTS: 429,
  UNSUPPORTED_MEDIA_TYPE: 415,
  INTERNAL: 500,
  PROJECTIONS_UNAVAILABLE: 503,
  EVENT_LOG_UNAVAILABLE: 503,
  GATEWAY_UNAVAILABLE: 503,
  SCHEDULER_UNAVAILABLE: 503,
  PROJECTION_TIMEOUT: 504,
} as const;
export type ApiErrorCode = keyof typeof STATUS_BY_CODE;

export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}

function zodDetails(err: ZodError) {
  return err.issues.map((i) => ({ field: i.path.join('.'), message: i.message }));
}

/** Turns anything thrown by a handler into a status and an `{error}` body. */
export function toErrorResponse(err: unknown): { status: number; body: ErrorBody } {
  let e: ApiError;
  if (err instanceof ApiError) e = err;
  else if (hasZodFastifySchemaValidationErrors(err)) {
    const context = err.validationContext ?? 'body';
    const where = context === 'body' ? '' : `${context === 'querystring' ? 'query' : context}.`;
    const details = err.validation.map((v) => ({
      field: `${where}${v.instancePath.slice(1).replaceAll('/', '.')}`.replace(/\.$/, ''),
      message: v.message ?? 'invalid',
    }));
    const first = details[0];
    e = new ApiError(
      'VALIDATION_FAILED',
      first ? `${first.field || 'body'}: ${first.message}` : 'invalid input',
      details,
    );
  } else if (err instanceof ResponseSerializationError) {
    e = new ApiError('INTERNAL', 'internal error: an answer did not match its schema');
  } else if (err instanceof ZodError) {
    const details = zodDetails(err);
    const first = details[0];
    e = new ApiError(
      'VALIDATION_FAILED',
      first ? `${first.field || 'body'}: ${first.message}` : 'invalid input',
      details,
    );
  } else if (err instanceof DomainError) e = new ApiError(err.code, err.message);
  else if (err instanceof ConcurrencyError)
    e = new ApiError('CONCURRENCY_CONFLICT', 'it changed meanwhile; try again');
  else if (err instanceof ArchiveError) e = new ApiError('BAD_ARCHIVE', err.message);
  else if (err instanceof EventStoreError && err.code === 'EVENT_LOG_UNAVAILABLE') {
    e = new ApiError('EVENT_LOG_UNAVAILABLE', 'the event log is unavailable; try again shortly');
  } else {
    const fastifyErr = err as { statusCode?: number; code?: string; message?: string };
    if (/^FST_(FILES|PARTS|FIELDS)_LIMIT$/.test(fastifyErr.code ?? '')) {
      e = new ApiError(
        'VALIDATION_FAILED',
        'a submission is one `spec` field and at most one `code` file',
      );
    } else if (fastifyErr.code === 'FST_REQ_FILE_TOO_LARGE' || fastifyErr.statusCode === 413) {
      e = new ApiError('PAYLOAD_TOO_LARGE', 'the upload is too large');
    } else if (fastifyErr.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      e = new ApiError('UNSUPPORTED_MEDIA_TYPE', fastifyErr.message ?? 'unsupported content type');
    } else if (
      fastifyErr.statusCode &&
      fastifyErr.statusCode >= 400 &&
      fastifyErr.statusCode < 500
    ) {
      e = new ApiError('VALIDATION_FAILED', fastifyErr.message ?? 'bad request');
    } else {
      e = new ApiError('INTERNAL', 'internal error');
    }
  }
  const body: ErrorBody = { error: { code: e.code, message: e.message } };
  if (e.details !== undefined) body.error.details = e.details;
  return { status: STATUS_BY_CODE[e.code], body };
}
