import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CliError } from './errors.ts';

/** Writes a download to `target`, checking its sha256 on the way; a mismatch keeps nothing. */
export async function download(res: Response, target: string, sha256: string): Promise<void> {
  const hash = createHash('sha256');
  const tmp = `${target}.trainyard-partial`;
  await mkdir(dirname(target), { recursive: true });
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  try {
    await pipeline(Readable.fromWeb(res.body as never), tap, createWriteStream(tmp));
    const got = hash.digest('hex');
    if (got !== sha256) {
      throw new CliError(
        `${target}: its sha256 is ${got}, the server has ${sha256}; the download was corrupted, nothing was kept`,
        'CHECKSUM_MISMATCH',
      );
    }
    await rename(tmp, target);
  } finally {
    await rm(tmp, { force: true });
  }
}
