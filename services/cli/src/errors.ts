import { cleanLog } from './output.ts';

/** A failure to show a person as one line: what went wrong and what to do about it. */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly code = 'CLI_ERROR',
    readonly exitCode = 1,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

const TLS_CODES =
  /^(CERT_|ERR_TLS_|ERR_SSL_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT|UNABLE_TO_)/;

/** The codes of an error and of its causes, outermost first. */
export function codesOf(err: unknown): string[] {
  const codes: string[] = [];
  let e = err as { code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && depth < 6; depth++) {
    if (typeof e.code === 'string') codes.push(e.code);
    e = e.cause as typeof e;
  }
  return codes;
}

const NETWORK_CODE =
  /^(E[A-Z]+|UND_ERR_\w+|CERT_\w+|ERR_TLS_\w+|ERR_SSL_\w+|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT\w*|UNABLE_TO_\w+)$/;

/** The code of a network error, looking through `cause` (fetch and migrations wrap it). */
export function networkCode(err: unknown): string | undefined {
  const codes = codesOf(err);
  return codes.find((c) => NETWORK_CODE.test(c)) ?? codes[0];
}

/** Why a connection to `url` failed, in words: refused, DNS, TLS, timeout or reset. */
export function connectionProblem(err: unknown, url: string): string {
  const code = networkCode(err) ?? '';
  let host = url;
  let port = '';
  try {
    ({ host, port } = new URL(url));
  } catch {
    host = url;
  }
  const detail = `${(err as { cause?: { message?: string } }).cause?.message ?? ''}`.trim();
  if (code === 'ECONNREFUSED') return `connection refused: nothing listens at ${host}`;
  if (/wrong version number|packet length too long|http request/i.test(detail))
    return 'the server answered in plain HTTP, not TLS: use http:// rather than https://';
  if (/^bad port$/i.test(detail))
    return `fetch refuses to connect to port ${port} (a port browsers block); serve the API on another`;
  if (/unknown scheme|not implemented/i.test(detail)) return 'only http:// and https:// URLs work';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME')
    return `the host name in ${host} could not be resolved (DNS)`;
  if (TLS_CODES.test(code)) return `TLS failed: ${detail || code}`;
  if (code === 'ECONNRESET' && url.startsWith('https:'))
    return 'the connection closed during the TLS handshake (does it serve plain http?)';
  if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT')
    return `the connection to ${host} timed out`;
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'the connection was reset';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return `${host} is unreachable`;
  const message = (err as Error)?.message ?? String(err);
  if (/(object store|stream) not found/i.test(message))
    return `${host} answers, but holds no Trainyard streams (${message}): is it the NATS of a running Trainyard? \`npm run up\` starts one; a worker joins one with --token`;
  return code ? `${message} (${code})` : message;
}

/** Whether `--verbose` or `TRAINYARD_DEBUG` asks for stacks. */
export const verbose = (argv = process.argv, env = process.env) =>
  argv.includes('--verbose') || ((env.TRAINYARD_DEBUG ?? '') !== '' && env.TRAINYARD_DEBUG !== '0');

/**
 * The one line a person sees for an error. Errors Trainyard raises on purpose carry their own
 * message; anything else is named as unexpected, with the way to see more.
 */
export function describeError(err: unknown): string {
  if (err instanceof CliError) return cleanLog(err.message);
  const e = err as { name?: string; code?: unknown; message?: string };
  if (e?.name === 'ServerError' || e?.name === 'ConfigError') return e.message ?? String(err);
  if (e?.code === 'EADDRINUSE') {
    const port = (err as { port?: number }).port;
    return `port ${port ?? '?'} is already in use by another program; choose another port`;
  }
  const message = e?.message ?? String(err);
  return `${message} (unexpected; run again with --verbose to see where it came from)`;
}
