import { CliError, codesOf, connectionProblem } from '@trainyard/cli';

/** A URL (or a comma-separated list of them) with any password replaced by `***`. */
export function redactUrl(urls: string): string {
  return urls
    .split(',')
    .map((u) => {
      try {
        const url = new URL(u);
        if (url.password) url.password = '***';
        return url.toString().replace(/\/$/, '');
      } catch {
        return u.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
      }
    })
    .join(',');
}

const PG_CODES: Record<string, string> = {
  '28P01': 'the password was refused',
  '28000': 'the role does not exist or may not log in',
  '3D000': 'the database does not exist',
  '57P03': 'the server is starting up or shutting down',
};

/**
 * Runs `open` against a server named by `variable`; a failure becomes one line naming the server,
 * the URL (password hidden), the variable that sets it and why it failed.
 */
export async function reach<T>(
  what: 'NATS' | 'PostgreSQL',
  url: string,
  variable: string,
  open: () => Promise<T>,
): Promise<T> {
  try {
    return await open();
  } catch (err) {
    const pgCode = codesOf(err).find((c) => c in PG_CODES);
    const why = pgCode ? PG_CODES[pgCode]! : connectionProblem(err, url.split(',')[0] ?? url);
    throw new CliError(
      `cannot connect to ${what} at ${redactUrl(url)} (${variable}): ${why}`,
      'UNREACHABLE',
      1,
      { cause: err },
    );
  }
}
