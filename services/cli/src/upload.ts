import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { ProgressBar } from './progress.ts';

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
