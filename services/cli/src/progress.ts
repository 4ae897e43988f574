import { bytes } from './commands/table.ts';

/** A progress bar on stderr for a TTY; elsewhere a single line when done. */
export class ProgressBar {
  #done = 0;
  #lastDraw = 0;
  readonly #tty = Boolean(process.stderr.isTTY);

  constructor(
    private readonly label: string,
    private readonly total: number,
  ) {}

  tick(n: number): void {
    this.#done += n;
    const now = Date.now();
    if (this.#tty && (now - this.#lastDraw > 50 || this.#done >= this.total)) {
      this.#lastDraw = now;
      this.#draw();
    }
  }

  #draw(): void {
    const ratio = this.total > 0 ? Math.min(1, this.#done / this.total) : 1;
    const width = 30;
    const filled = Math.round(ratio * width);
    const bar = '#'.repeat(filled) + '.'.repeat(width - filled);
    const pct = String(Math.round(ratio * 100)).padStart(3);
    process.stderr.write(
      `\r${this.label} [${bar}] ${pct}% ${bytes(this.#done)} of ${bytes(this.total)}   `,
    );
  }

  finish(): void {
    if (this.#tty) {
      this.#draw();
      process.stderr.write('\n');
    } else {
      process.stderr.write(`${this.label}: ${bytes(this.total)} sent\n`);
    }
  }
}
