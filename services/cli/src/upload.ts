import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ApiClient } from './client.ts';
import { CliError } from './client.ts';
import { bytes } from './commands/table.ts';
import { packFiles, planPack } from './pack.ts';
import { ProgressBar } from './progress.ts';

/**
 * Packs the directory `root` (what its `.trainyardignore` leaves in) into an archive on local
 * disk, refuses it if it is over the server's upload limit, and posts it to `path` with `spec`,
 * as multipart. A directory with nothing to pack sends the spec alone. Returns the API's answer.
 */
export async function postWithCode<T>(
  client: ApiClient,
  path: string,
  root: string,
  spec: unknown,
): Promise<T> {
  const plan = planPack(root);
  if (plan.files.length === 0) {
    console.error(`${root} holds no files to upload: sending the spec without code`);
    return client.post<T>(path, spec);
  }
  const limits = await client.json<{ maxUploadBytes: number }>('/v1/limits');
  const scratch = await mkdtemp(join(tmpdir(), 'trainyard-code-'));
  const archive = join(scratch, 'code.tar.gz');
  try {
    await pipeline(packFiles(root, plan.files), createWriteStream(archive, { mode: 0o600 }));
    const { size } = await stat(archive);
    if (size > limits.maxUploadBytes) {
      throw new CliError(
        `the code archive is ${bytes(size)}, over this server's limit of ${bytes(limits.maxUploadBytes)}; leave large files out with a .trainyardignore (trainyard submit DIR --dry-run lists what is packed)`,
        'ARCHIVE_TOO_LARGE',
      );
    }
    const { body, headers } = multipartBody(spec, archive, size);
    const res = await client.request(path, { method: 'POST', body, headers, duplex: 'half' });
    return (await res.json()) as T;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/**
 * A multipart body with a JSON `spec` field and a `code` file read from disk, as a stream with
 * a known length, ticking a progress bar as the file is read.
 */
export function multipartBody(spec: unknown, file: string, size: number) {
  const boundary = `----trainyard${randomBytes(12).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="spec"\r\ncontent-type: application/json\r\n\r\n` +
      `${JSON.stringify(spec)}\r\n` +
      `--${boundary}\r\ncontent-disposition: form-data; name="code"; filename="code.tar.gz"\r\n` +
      `content-type: application/gzip\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const bar = new ProgressBar('uploading code', size);
  async function* parts() {
    yield head;
    for await (const chunk of createReadStream(file)) {
      bar.tick((chunk as Buffer).length);
      yield chunk as Buffer;
    }
    bar.finish();
    yield tail;
  }
  return {
    body: Readable.toWeb(Readable.from(parts())) as ReadableStream<Uint8Array>,
    headers: {
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': String(head.length + size + tail.length),
    },
  };
}
