/** Reading a Docker engine's progress streams and errors, for the builder's output and failures. */

/** A line of a daemon's progress stream (build, pull or push). */
export interface ProgressEvent {
  stream?: string;
  status?: string;
  id?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { ID?: string; Digest?: string };
}

/** Reads a progress stream (a JSON object a line) to its end, handing each event on as it arrives. */
export async function readProgress(
  stream: NodeJS.ReadableStream,
  onEvent: (event: ProgressEvent) => void,
): Promise<void> {
  stream.setEncoding('utf8');
  let rest = '';
  const parse = (line: string) => {
    if (!line.trim()) return;
    try {
      onEvent(JSON.parse(line) as ProgressEvent);
    } catch {
      onEvent({ stream: `${line}\n` });
    }
  };
  for await (const chunk of stream) {
    rest += chunk as string;
    const lines = rest.split('\n');
    rest = lines.pop()!;
    lines.forEach(parse);
  }
  parse(rest);
}

/** The error a progress event reports, if it reports one. */
export const errorOf = (e: ProgressEvent) => e.errorDetail?.message ?? e.error;

/** The terminal colours the classic builder wraps a step's stderr in. */
// eslint-disable-next-line no-control-regex -- an escape sequence starts with ESC
const COLOURS = /\u001b\[[0-9;]*m/g;

/** The longest line a build's output is held for before it is handed on as it is. */
const MAX_LINE = 16 * 1024;

/** Joins a build's output text into lines, which arrive in pieces, without terminal colours. */
export function lineSplitter(onLine: (line: string) => void) {
  let rest = '';
  return {
    push(text: string) {
      const lines = (rest + text).split('\n');
      rest = lines.pop()!;
      // Output that never ends a line is handed on in pieces rather than held without bound.
      if (rest.length > MAX_LINE) {
        lines.push(rest);
        rest = '';
      }
      for (const raw of lines) {
        const line = raw.replace(COLOURS, '').replace(/\r$/, '');
        if (line.trim()) onLine(line);
      }
    },
    flush() {
      const line = rest.replace(COLOURS, '');
      if (line.trim()) onLine(line);
      rest = '';
    },
  };
}

/** Hides the registry password in any text that could reach a log or a message. */
export function redactor(secret: string | undefined): (text: string) => string {
  return secret ? (text) => text.split(secret).join('***') : (text) => text;
}

/** What a dockerode error says: the engine's own message where it sent one. */
export function messageOf(err: unknown): string {
  const { json, message } = err as { json?: unknown; message?: string };
  if (typeof json === 'string' && json.trim()) return json.trim();
  const sent = (json as { message?: unknown } | null | undefined)?.message;
  if (typeof sent === 'string') return sent;
  // dockerode puts the engine's text after its own status words: "(HTTP code 500) server error - …".
  return (message ?? String(err)).replace(/^\(HTTP code \d+\) [^-]*- /, '').trim();
}

/** Whether the engine could not be reached at all (its socket refused, missing or closed). */
export function engineUnreachable(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return ['ECONNREFUSED', 'ENOENT', 'EACCES', 'ECONNRESET', 'EPIPE'].includes(code ?? '');
}
