import { closeSync, constants, fstatSync, openSync, readSync, statSync } from 'node:fs';
import { dirname } from 'node:path';

const TAIL_MS = 50;
/** Reads one pass of a tail makes at most, so that a flood of output cannot hold the loop. */
const MAX_READS_PER_PASS = 64;

/** How a file the job may have written is opened: see `openJobFile`. */
export const JOB_FILE =
  constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * Opens a file the job may have written, for reading, without following a link it put there,
 * without blocking on a FIFO and without taking a terminal as the worker's own; null unless it
 * is a regular file (and, given `uid`, one that account owns: never a hard link to another's
 * file).
 */
export function openJobFile(file: string, uid?: number): number | null {
  let fd: number;
  try {
    fd = openSync(file, JOB_FILE);
  } catch {
    return null;
  }
  try {
    const stat = fstatSync(fd);
    if (stat.isFile() && (uid === undefined || stat.uid === uid)) return fd;
  } catch {
    // Treated as no file, below.
  }
  closeSync(fd);
  return null;
}

export interface FileTailOptions {
  /** Where in the file to start; default its beginning. */
  offset?: number;
  /** How often it looks for more; default 50 ms. */
  everyMs?: number;
  /** The most it reads in all; default no limit. */
  maxBytes?: number;
  /** Called once when it stops at `maxBytes` with more in the file. */
  onLimit?: () => void;
  /**
   * The job writes the file, in a directory the worker made and gave it: it is opened with
   * `openJobFile`, as owned by whoever owns that directory.
   */
  writtenByJob?: boolean;
}

/**
 * Reads what is appended to a file and hands it over in order. The file is opened once it
 * exists: the process it tails creates it. Reads are synchronous: the file is on the sandbox's
 * local disk, and a read there costs the event loop less than a round trip through the thread
 * pool.
 */
export class FileTail {
  #offset: number;
  /** Where `maxBytes` ends. */
  readonly #limit: number;
  /** Where it stops reading: its byte limit, or the file's size when it was closed. */
  #end: number;
  #limited = false;
  #fd: number | null = null;
  #timer: NodeJS.Timeout;
  #stopped = false;
  readonly #buffer = Buffer.alloc(64 * 1024);
  constructor(
    private readonly path: string,
    private readonly onChunk: (chunk: Buffer) => void,
    private readonly opts: FileTailOptions = {},
  ) {
    this.#offset = opts.offset ?? 0;
    this.#limit = this.#offset + (opts.maxBytes ?? Infinity);
    this.#end = this.#limit;
    this.#timer = setInterval(() => this.#read(MAX_READS_PER_PASS), opts.everyMs ?? TAIL_MS);
  }

  #open(): number | null {
    try {
      if (!this.opts.writtenByJob) return openSync(this.path, 'r');
      return openJobFile(this.path, statSync(dirname(this.path)).uid);
    } catch {
      return null;
    }
  }

  /**
   * Reads on from where it was, up to `maxReads` buffers, its end or the end of the file. True
   * when it stopped at `maxReads` with more perhaps left to read.
   */
  #read(maxReads: number): boolean {
    this.#fd ??= this.#open();
    if (this.#fd === null) return false;
    for (let reads = 0; reads < maxReads; reads++) {
      const want = Math.min(this.#buffer.length, this.#end - this.#offset);
      if (this.#stopped) return false;
      if (want <= 0) {
        if (!this.#limited && this.#offset >= this.#limit && sizeOf(this.#fd) > this.#offset) {
          this.#limited = true;
          this.opts.onLimit?.();
        }
        return false;
      }
      let bytesRead: number;
      try {
        bytesRead = readSync(this.#fd, this.#buffer, 0, want, this.#offset);
      } catch {
        return false;
      }
      if (bytesRead === 0) return false;
      this.#offset += bytesRead;
      this.onChunk(Buffer.from(this.#buffer.subarray(0, bytesRead)));
    }
    return true;
  }

  #closed: Promise<void> | null = null;

  /**
   * Reads what the file holds now, pass by pass (not what is written to it meanwhile), stops and
   * closes it; once, however often it is called. With `drain` false it reads nothing more, the
   * pass under way included.
   */
  close(drain = true): Promise<void> {
    this.#stopped ||= !drain;
    // Begun on the next tick, so that a reader that closes it from within a pass of reads finds
    // it closing already.
    this.#closed ??= Promise.resolve().then(async () => {
      clearInterval(this.#timer);
      this.#fd ??= this.#open();
      if (this.#fd !== null) this.#end = Math.min(this.#end, sizeOf(this.#fd));
      while (this.#read(MAX_READS_PER_PASS)) await new Promise((r) => setImmediate(r));
      if (this.#fd !== null) closeSync(this.#fd);
    });
    return this.#closed;
  }
}

function sizeOf(fd: number): number {
  try {
    return fstatSync(fd).size;
  } catch {
    return 0;
  }
}
