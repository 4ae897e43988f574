import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { ApiDeps } from '../deps.ts';
import { logEventStream, type AttemptHeader, type LogEnd } from '../log-events.ts';
import { parsePosition, readLog, type LogOwner } from '../logs.ts';
import { queryFlag } from '../schemas.ts';

export const LogQuery = z.object({
  follow: queryFlag('stream until nothing more will be written'),
  from: z
    .string()
    .regex(/^\d+:\d+$/)
    .optional()
    .describe('event stream: resume after this ATTEMPT:OFFSET (or send Last-Event-ID)'),
});

/** What a log route's description says of its event stream. */
export const LOG_EVENTS =
  'With `Accept: text/event-stream`, server-sent events: `attempt` ({attempt, build, workerId, gpus}) opens each part (attempt 0 is the build), `log` carries text with the id ATTEMPT:OFFSET (resume with Last-Event-ID or `from`), `caught-up` marks the end of what was there at the request, `end` ({status, ended, exitCode, failure}) closes the stream.';

export const LOG_RESPONSE = {
  description: 'The log',
  content: {
    'text/plain': { schema: z.string() },
    'text/event-stream': { schema: z.string() },
  },
};

/**
 * A stream as a route's body. Fastify sends streams as they are, unserialized; the route's
 * schema describes the text they carry, so the types call for a string.
 */
export const streamed = (body: NodeJS.ReadableStream) => body as unknown as string;

/**
 * Sends `owner`'s log: plain text, or server-sent events when the client asks for them, with
 * `header` opening each part and `end` saying how things stand once the log ends.
 */
export async function sendLog(
  deps: ApiDeps,
  req: Pick<FastifyRequest, 'headers' | 'raw'> & { query: z.infer<typeof LogQuery> },
  reply: FastifyReply,
  owner: LogOwner,
  describe: { header: (attempt: number) => Promise<AttemptHeader>; end: () => Promise<LogEnd> },
): Promise<FastifyReply> {
  const events = (req.headers.accept ?? '').includes('text/event-stream');
  const lastEventId = req.headers['last-event-id'];
  const from = parsePosition(
    req.query.from ?? (typeof lastEventId === 'string' ? lastEventId : undefined),
  );
  const abort = new AbortController();
  req.raw.on('close', () => abort.abort());
  const pieces = await readLog(deps.bus, deps.blobs, owner, {
    follow: req.query.follow,
    signal: abort.signal,
    ...(from && { from }),
  });
  void reply.header('cache-control', 'no-store');
  if (!events) {
    async function* text() {
      for await (const piece of pieces) if (piece.kind === 'chunk') yield piece.data;
    }
    return reply.type('text/plain; charset=utf-8').send(streamed(Readable.from(text())));
  }
  void reply.header('x-accel-buffering', 'no');
  return reply
    .type('text/event-stream')
    .send(streamed(logEventStream(pieces, describe.header, describe.end)));
}
