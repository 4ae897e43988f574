import {
  apiUrl,
  profileName,
  readCredentials,
  writeCredentials,
  type CliCredentials,
} from './config.ts';
import { CliError, connectionProblem, networkCode } from './errors.ts';

export { CliError } from './errors.ts';

const PUBLIC = new Set(['/v1/auth/login', '/v1/auth/refresh']);

/** Refresh a saved login this long before its access token expires. */
const REFRESH_EARLY_MS = 30_000;

interface ErrorBody {
  error?: { code?: string; message?: string };
}

interface TokenAnswer {
  token: string;
  refreshToken: string;
  username: string;
  expiresAt: string;
}

/** Where a token comes from: a saved login (refreshed as needed), or `TRAINYARD_TOKEN`. */
type TokenSource = { kind: 'saved'; creds: CliCredentials } | { kind: 'env' } | { kind: 'none' };

/** Two API URLs name the same server: scheme, host, port and path. */
export function sameServer(a: string, b: string): boolean {
  try {
    const [x, y] = [new URL(a), new URL(b)];
    const path = (u: URL) => u.pathname.replace(/\/+$/, '');
    return x.origin === y.origin && path(x) === path(y);
  } catch {
    return false;
  }
}

/** The API URL, checked: a person who typed `host:8080` learns what a URL looks like. */
function checkedUrl(url: string): string {
  if (!/^https?:\/\/[^/\s]+/i.test(url)) {
    throw new CliError(
      `the API URL must look like http://host:port (or https://), not "${url}" (--api or TRAINYARD_API_URL)`,
      'BAD_URL',
    );
  }
  return url.replace(/\/+$/, '');
}

const isLoopback = (url: string) => /^https?:\/\/(127\.|localhost|\[::1\])/i.test(url);

/**
 * A small client for the HTTP API. A saved login is sent only to the server it was made for,
 * and is refreshed (with its refresh token) when its access token expires.
 */
export class ApiClient {
  #source: TokenSource;
  #token: string | null;

  constructor(
    readonly baseUrl: string,
    token: string | null,
    source: TokenSource = token ? { kind: 'env' } : { kind: 'none' },
  ) {
    this.#token = token;
    this.#source = source;
  }

  get token(): string | null {
    return this.#token;
  }

  static fromEnv(explicitUrl?: string): ApiClient {
    const url = checkedUrl(apiUrl(explicitUrl));
    const fromEnv = process.env.TRAINYARD_TOKEN;
    if (fromEnv) return new ApiClient(url, fromEnv, { kind: 'env' });
    const creds = readCredentials();
    if (creds && sameServer(creds.apiUrl, url))
      return new ApiClient(url, creds.token, { kind: 'saved', creds });
    return new ApiClient(url, null, { kind: 'none' });
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.#token && { authorization: `Bearer ${this.#token}` }), ...extra };
  }

  /** Sends a request; any answer but a 2xx becomes a `CliError` that says what to do. */
  async request(path: string, init: RequestInit & { duplex?: 'half' } = {}): Promise<Response> {
    if (!PUBLIC.has(path)) await this.#refreshIfDue();
    const res = await this.#send(path, init);
    if (res.ok) return res;
    const failure = await this.#failure(res, path);
    const replayable = init.body === undefined || typeof init.body === 'string';
    if (failure.code === 'TOKEN_EXPIRED' && replayable && (await this.#refresh())) {
      const again = await this.#send(path, init);
      if (again.ok) return again;
      throw await this.#failure(again, path);
    }
    throw failure;
  }

  async #send(path: string, init: RequestInit & { duplex?: 'half' }): Promise<Response> {
    try {
      return await fetch(`${this.baseUrl}${path}`, {
        ...init,
        headers: this.headers((init.headers as Record<string, string>) ?? {}),
      });
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      throw this.#unreachable(err);
    }
  }

  #unreachable(err: unknown): CliError {
    const code = networkCode(err);
    const detail = `${(err as { cause?: { message?: string } }).cause?.message ?? ''}`;
    if (code === 'UND_ERR_INVALID_ARG' && /header/i.test(detail)) {
      const where = this.#source.kind === 'env' ? 'TRAINYARD_TOKEN' : 'the saved login';
      return new CliError(
        `the token in ${where} holds characters no HTTP header may carry; set a valid one`,
        'BAD_TOKEN',
        1,
        { cause: err },
      );
    }
    const advice =
      networkCode(err) === 'ECONNREFUSED' && isLoopback(this.baseUrl)
        ? 'Start it with `npm run up`, or point the CLI at it with --api URL or TRAINYARD_API_URL'
        : 'Check the URL (--api or TRAINYARD_API_URL)';
    return new CliError(
      `cannot reach the Trainyard API at ${this.baseUrl}: ${connectionProblem(err, this.baseUrl)}. ${advice}`,
      'UNREACHABLE',
      1,
      { cause: err },
    );
  }

  async #refreshIfDue(): Promise<void> {
    if (this.#source.kind !== 'saved' || !this.#source.creds.expiresAt) return;
    if (Date.parse(this.#source.creds.expiresAt) - Date.now() > REFRESH_EARLY_MS) return;
    await this.#refresh();
  }

  /** Trades the saved refresh token for a new login, and saves it; false when that fails. */
  async #refresh(): Promise<boolean> {
    if (this.#source.kind !== 'saved' || !this.#source.creds.refreshToken) return false;
    const res = await this.#send('/v1/auth/refresh', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ refreshToken: this.#source.creds.refreshToken }),
    });
    if (!res.ok) return false;
    const next = (await res.json()) as TokenAnswer;
    const creds: CliCredentials = {
      ...this.#source.creds,
      token: next.token,
      refreshToken: next.refreshToken,
      expiresAt: next.expiresAt,
    };
    await writeCredentials(creds);
    this.#source = { kind: 'saved', creds };
    this.#token = next.token;
    return true;
  }

  async #failure(res: Response, path: string): Promise<CliError> {
    const type = res.headers.get('content-type') ?? '';
    const body = type.includes('json') ? ((await res.json().catch(() => null)) as ErrorBody) : null;
    const code = body?.error?.code;
    const message = body?.error?.message;
    if (!code || !message) {
      return new CliError(
        `${this.baseUrl} answered HTTP ${res.status} ${res.statusText} without a Trainyard error; is it the Trainyard API? (--api URL or TRAINYARD_API_URL)`,
        `HTTP_${res.status}`,
      );
    }
    if (res.status === 401 && !PUBLIC.has(path))
      return new CliError(this.#loginAdvice(code, message), code);
    return new CliError(`${message} (${code})`, code);
  }

  #loginAdvice(code: string, message: string): string {
    const profile = profileName();
    const login = `trainyard login --api ${this.baseUrl}${profile === 'default' ? '' : ` --profile ${profile}`}`;
    if (this.#source.kind === 'env')
      return `${this.baseUrl} does not accept the token in TRAINYARD_TOKEN (${message}): set a valid one, or unset it to use your saved login`;
    if (this.#source.kind === 'none') {
      const saved = readCredentials();
      const elsewhere = saved ? ` (your saved login is for ${saved.apiUrl})` : '';
      return `not logged in to ${this.baseUrl}${elsewhere}: run \`${login}\``;
    }
    if (code === 'TOKEN_EXPIRED')
      return `your login to ${this.baseUrl} has expired: run \`${login}\` again`;
    return `${this.baseUrl} does not accept your saved login (${message}): run \`${login}\` again`;
  }

  async json<T>(path: string, init: RequestInit = {}): Promise<T> {
    const res = await this.request(path, init);
    return (await res.json()) as T;
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.send<T>('POST', path, body);
  }

  patch<T>(path: string, body: unknown): Promise<T> {
    return this.send<T>('PATCH', path, body);
  }

  put<T>(path: string, body: unknown): Promise<T> {
    return this.send<T>('PUT', path, body);
  }

  private send<T>(method: 'POST' | 'PATCH' | 'PUT', path: string, body: unknown): Promise<T> {
    return this.json<T>(path, {
      method,
      body: JSON.stringify(body ?? {}),
      headers: { 'content-type': 'application/json' },
    });
  }
}
