import { PassThrough, type Readable } from 'node:stream';
import type { LogPiece } from './logs.ts';

/** Who ran an attempt, for the line that opens its part of the log. */
export interface AttemptHeader {
  attempt: number;
  /** Attempt 0 is the build. */
  build: boolean;
  workerId: string | null;
  gpus: number[];
}

/** How the job stands when the log ends. */
export interface LogEnd {
  status: string;
  ended: boolean;
  exitCode: number | null;
  failure: { kind: string; reason: string; message: string } | null;
}

const KEEP_ALIVE_MS = 15_000;

/** The length of the longest prefix of `bytes` that does not cut a UTF-8 character in two. */
export function wholeUtf8(bytes: Uint8Array): number {
  const n = bytes.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const b = bytes[n - back]!;
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

const frame = (event: string, data: unknown, id?: string) =>
  `${id ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/**
 * A job's log as server-sent events: `attempt` opens each attempt's part, `log` carries text
 * with the id `ATTEMPT:OFFSET` of where it ends (send it back as `Last-Event-ID` to resume
 * there), `caught-up` says the log as it was at the request is out, and `end` closes the stream
 * with how the job stands. Text is never cut inside a UTF-8 character; a partial one waits for
 * the rest of it.
 */
export function logEventStream(
  pieces: AsyncIterable<LogPiece>,
  header: (attempt: number) => Promise<AttemptHeader>,
  end: () => Promise<LogEnd>,
): Readable {
  const out = new PassThrough();
  const ping = setInterval(() => out.write(': keep-alive\n\n'), KEEP_ALIVE_MS);
  let current = -1;
  let pending: { offset: number; bytes: Uint8Array } | null = null;
  const flushText = (attempt: number, offset: number, bytes: Uint8Array, whole: boolean) => {
    const cut = whole ? bytes.length : wholeUtf8(bytes);
    pending = cut < bytes.length ? { offset: offset + cut, bytes: bytes.slice(cut) } : null;
    if (cut === 0) return;
    const text = Buffer.from(bytes.buffer, bytes.byteOffset, cut).toString('utf8');
    out.write(frame('log', text, `${attempt}:${offset + cut}`));
  };
  const pump = async () => {
    out.write('retry: 2000\n\n');
    for await (const piece of pieces) {
      if (piece.kind === 'caught-up') {
        out.write(frame('caught-up', {}));
        continue;
      }
      if (piece.attempt !== current) {
        if (pending) flushText(current, pending.offset, pending.bytes, true);
        current = piece.attempt;
        out.write(frame('attempt', await header(current)));
      }
      const held: { offset: number; bytes: Uint8Array } | null = pending;
      const joined: { offset: number; bytes: Uint8Array } =
        held && held.offset + held.bytes.length === piece.offset
          ? { offset: held.offset, bytes: Buffer.concat([held.bytes, piece.data]) }
          : { offset: piece.offset, bytes: piece.data };
      flushText(current, joined.offset, joined.bytes, false);
    }
    if (pending) flushText(current, pending.offset, pending.bytes, true);
    out.write(frame('end', await end()));
  };
  pump().then(
    () => {
      clearInterval(ping);
      out.end();
    },
    (err: unknown) => {
      clearInterval(ping);
      out.destroy(err as Error);
    },
  );
  return out;
}
