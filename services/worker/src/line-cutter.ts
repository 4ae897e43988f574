import { MAX_METRIC_LINE_BYTES } from '@trainyard/events';

const LF = 10;
const CR = 13;

/** Where the next line break (a newline or a carriage return) is in `chunk` from `from`; -1 if none. */
function lineBreak(chunk: Buffer, from: number): number {
  const lf = chunk.indexOf(LF, from);
  const cr = chunk.indexOf(CR, from);
  if (lf === -1) return cr;
  return cr === -1 ? lf : Math.min(lf, cr);
}

/**
 * Cuts a source into lines, each ended by a newline or a carriage return (a progress bar's
 * redraw), and hands over each whole one with where it starts. A line longer than
 * `MAX_METRIC_LINE_BYTES` is skipped whole (and told to `onSkip`); given `prefix`, a line that
 * does not start with it is passed over without being kept, however long it is.
 */
export class LineCutter {
  #parts: Buffer[] = [];
  #length = 0;
  #skipping = false;
  #lineStart = 0;
  #offset = 0;
  readonly #prefix: Buffer | null;
  readonly #onSkip: () => void;

  constructor(
    private readonly onLine: (line: string, offset: number) => void,
    opts: { prefix?: Buffer; onSkip?: () => void } = {},
  ) {
    this.#prefix = opts.prefix ?? null;
    this.#onSkip = opts.onSkip ?? (() => undefined);
  }

  /** Where the next chunk starts. */
  get offset(): number {
    return this.#offset;
  }

  /** Where the line under way starts: every line before it has been handed over. */
  get lineStart(): number {
    return this.#lineStart;
  }

  /**
   * Goes on from `offset`: the start of a line, or (`inLine`) a place inside one, which is
   * skipped up to its end.
   */
  moveTo(offset: number, inLine: boolean): void {
    this.#offset = this.#lineStart = offset;
    this.#parts = [];
    this.#length = 0;
    this.#skipping = inLine;
  }

  write(chunk: Buffer): void {
    let pos = 0;
    while (pos < chunk.length) {
      const end = lineBreak(chunk, pos);
      const stop = end === -1 ? chunk.length : end;
      if (!this.#skipping && stop > pos) this.#keep(chunk.subarray(pos, stop));
      if (end === -1) break;
      if (!this.#skipping && this.#length > 0) this.#emit();
      this.#parts = [];
      this.#length = 0;
      this.#skipping = false;
      this.#lineStart = this.#offset + end + 1;
      pos = end + 1;
    }
    this.#offset += chunk.length;
  }

  /** Keeps a copy of part of the line under way: the caller may reuse its buffer. */
  #keep(part: Buffer): void {
    this.#length += part.length;
    const prefix = this.#prefix;
    const checked = prefix !== null && this.#length - part.length >= prefix.length;
    if (this.#length > MAX_METRIC_LINE_BYTES) {
      // A line too long to be a metric counts as a bad one only once it is known to be meant as one.
      if (!prefix || checked || this.#startsWithPrefix(part)) this.#onSkip();
      return this.#skip();
    }
    this.#parts.push(Buffer.from(part));
    if (!prefix || checked) return;
    if (!this.#startsWithPrefix()) this.#skip();
  }

  /** Whether what is kept of the line (and `more`) agrees with the prefix as far as it goes. */
  #startsWithPrefix(more?: Buffer): boolean {
    const prefix = this.#prefix!;
    const head = Buffer.concat(more ? [...this.#parts, more] : this.#parts);
    const n = Math.min(head.length, prefix.length);
    return head.compare(prefix, 0, n, 0, n) === 0;
  }

  #skip(): void {
    this.#skipping = true;
    this.#parts = [];
  }

  #emit(): void {
    const line = Buffer.concat(this.#parts);
    const skip = this.#prefix?.length ?? 0;
    if (line.length <= skip) return;
    this.onLine(line.subarray(skip).toString('utf8'), this.#lineStart);
  }
}
