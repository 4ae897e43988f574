const MiB = 1024 * 1024;

/** A progress bar on stderr for a TTY; elsewhere a single line when done. */
export class ProgressBar {
  #done = 0;
  #lastDraw = 0;
  readonly #tty = Boolean(process.stderr.isTTY);

  constructor(
    private readonly label: string,
    private readonly total: number,
  ) {}

  tick(bytes: number): void {
    this.#done += bytes;
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
      `\r${this.label} [${bar}] ${pct}% ${(this.#done / MiB).toFixed(1)}/${(this.total / MiB).toFixed(1)} MiB`,
    );
  }

  finish(): void {
    if (this.#tty) {
      this.#draw();
      process.stderr.write('\n');
    } else {
      process.stderr.write(`${this.label}: ${(this.total / MiB).toFixed(2)} MiB sent\n`);
    }
  }
}
