import type { Readable } from 'node:stream';
import { waitFor } from '@trainyard/testkit';
import type { Channel } from '@trainyard/tunnel';

/** Everything `stream` says, as it says it. */
export function collect(stream: Readable): () => string {
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  return () => Buffer.concat(chunks).toString('utf8');
}

/** SFTP packets (draft-ietf-secsh-filexfer-02) on a channel: written whole, read one at a time. */
export function sftpWire(ch: Channel) {
  let buffered = Buffer.alloc(0);
  ch.output.on('data', (chunk: Buffer) => (buffered = Buffer.concat([buffered, chunk])));
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const str = (s: string) => Buffer.concat([u32(Buffer.byteLength(s)), Buffer.from(s)]);
  return {
    str,
    u32,
    send(type: number, ...fields: Buffer[]) {
      const body = Buffer.concat([Buffer.from([type]), ...fields]);
      ch.input.write(Buffer.concat([u32(body.length), body]));
    },
    async next(what: string): Promise<{ type: number; body: Buffer }> {
      const whole = () => buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0);
      await waitFor(what, whole);
      const length = buffered.readUInt32BE(0);
      const packet = buffered.subarray(4, 4 + length);
      buffered = buffered.subarray(4 + length);
      return { type: packet[0]!, body: packet.subarray(1) };
    },
  };
}
