import { apiUrl, profileName, readCredentials } from './config.ts';
import { CliError, connectionProblem } from './errors.ts';

export { CliError } from './errors.ts';

const LOGIN = '/v1/auth/login';

interface ErrorBody {
  error?: { code?: string; message?: string };
}

/** A small client for the HTTP API, carrying the saved token. */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    readonly token: string | null,
  ) {}

  static fromEnv(explicitUrl?: string): ApiClient {
    const token = process.env.TRAINYARD_TOKEN ?? readCredentials()?.token ?? null;
    return new ApiClient(apiUrl(explicitUrl), token);
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.token && { authorization: `Bearer ${this.token}` }), ...extra };
  }

  /** Sends a request; any answer but a 2xx becomes a `CliError` that says what to do. */
  async request(path: string, init: RequestInit & { duplex?: 'half' } = {}): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        ...init,
        headers: this.headers((init.headers as Record<string, string>) ?? {}),
      });
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      throw new CliError(
        `cannot reach the Trainyard API at ${this.baseUrl}: ${connectionProblem(err, this.baseUrl)}. Start it with \`npm run up\`, or point the CLI at it with --api URL or TRAINYARD_API_URL`,
        'UNREACHABLE',
        1,
        { cause: err },
      );
    }
    if (res.ok) return res;
    throw await this.#failure(res, path);
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
    if (res.status === 401 && path !== LOGIN)
      return new CliError(this.#loginAdvice(code, message), code);
    return new CliError(`${message} (${code})`, code);
  }

  #loginAdvice(code: string, message: string): string {
    const profile = profileName();
    const login = `trainyard login --api ${this.baseUrl}${profile === 'default' ? '' : ` --profile ${profile}`}`;
    if (!this.token) return `not logged in to ${this.baseUrl}: run \`${login}\``;
    if (code === 'TOKEN_EXPIRED')
      return `your login to ${this.baseUrl} has expired: run \`${login}\` again`;
    return `${this.baseUrl} does not accept your saved login (${message}): run \`${login}\` again`;
  }

  async json<T>(path: string, init: RequestInit = {}): Promise<T> {
    const res = await this.request(path, init);
    return (await res.json()) as T;
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.json<T>(path, {
      method: 'POST',
      body: JSON.stringify(body ?? {}),
      headers: { 'content-type': 'application/json' },
    });
  }
}
