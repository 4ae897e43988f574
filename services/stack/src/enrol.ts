import { join } from 'node:path';
import { createUser } from '@nats-io/nkeys';
import { ApiClient, homeDirOf, readJson, writePrivate, CliError } from '@trainyard/cli';

/** What an enrolled worker keeps: its name, its nkey seed and where to connect. 0600. */
export interface WorkerCredential {
  name: string;
  seed: string;
  publicKey: string;
  natsUrl: string;
  enrolledAt: string;
}

/** Where a worker keeps its key: `--key`, else `TRAINYARD_HOME/secrets/worker-NAME.json`. */
export const workerKeyFile = (name: string, explicit?: string, env = process.env) =>
  explicit ?? join(homeDirOf(env), 'secrets', `worker-${name}.json`);

/**
 * The worker's key: made and enrolled with a one-time token when one is given, else the one
 * it enrolled with before, else null (a worker that logs in with a URL's login instead).
 */
export async function workerCredential(
  name: string,
  opts: { token?: string; key?: string; api?: string },
  env = process.env,
): Promise<{ credential: WorkerCredential; fresh: boolean } | null> {
  const file = workerKeyFile(name, opts.key, env);
  const kept = readJson<WorkerCredential>(file);
  // A token left in the environment (a service unit's, say) does not enrol again a worker that
  // holds its key; `--token` does.
  const token = opts.token ?? (kept ? undefined : env.TRAINYARD_ENROL_TOKEN);
  if (!token) {
    if (!kept) return null;
    if (kept.name !== name || !kept.seed || !kept.natsUrl) {
      throw new CliError(
        `${file} is not the key of worker ${name}: enrol it with a new token (--token), or give its own key with --key`,
        'BAD_WORKER_KEY',
      );
    }
    return { credential: kept, fresh: false };
  }
  const key = createUser();
  const publicKey = key.getPublicKey();
  const enrolled = await ApiClient.fromEnv(opts.api).post<{ name: string; natsUrl: string }>(
    '/v1/workers/enrol',
    { token, name, publicKey },
  );
  const credential: WorkerCredential = {
    name,
    seed: new TextDecoder().decode(key.getSeed()),
    publicKey,
    natsUrl: enrolled.natsUrl,
    enrolledAt: new Date().toISOString(),
  };
  await writePrivate(file, JSON.stringify(credential, null, 2));
  console.error(`enrolled as worker ${name}; its key is kept in ${file}`);
  return { credential, fresh: true };
}
