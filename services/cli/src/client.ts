import { apiUrl, readCredentials } from './config.ts';

/** An error answered by the API, or a failure to reach it. */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly code = 'CLI_ERROR',
    readonly exitCode = 1,
  ) {
    super(message);
  }
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

  async request(path: string, init: RequestInit & { duplex?: 'half' } = {}): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        ...init,
        headers: this.headers((init.headers as Record<string, string>) ?? {}),
      });
    } catch (err) {
      throw new CliError(
        `cannot reach the API at ${this.baseUrl}: ${(err as Error).message}`,
        'UNREACHABLE',
      );
    }
    if (res.ok) return res;
    const body = (await res.json().catch(() => null)) as {
      error?: { code: string; message: string };
    } | null;
    const code = body?.error?.code ?? `HTTP_${res.status}`;
    const hint = res.status === 401 ? ' (run `trainyard login`)' : '';
    throw new CliError(`${body?.error?.message ?? res.statusText}${hint}`, code);
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
