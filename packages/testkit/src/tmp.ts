import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A fresh directory under the system temp dir, readable by other users (PostgreSQL runs as `postgres`). */
export async function tempDir(
  prefix = 'trainyard-test-',
  under = tmpdir(),
): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(under, prefix));
  await chmod(path, 0o755);
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}
