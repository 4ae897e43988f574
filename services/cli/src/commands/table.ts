import { cleanName, safeJson } from '../output.ts';

/** Prints rows as aligned columns; what the server sent is cleaned of hidden characters. */
export function printTable(header: string[], raw: string[][]): void {
  const rows = raw.map((r) => r.map(cleanName));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  console.log(line(header));
  for (const row of rows) console.log(line(row));
}

/** Prints a value as indented JSON, for `--json`. */
export function printJson(value: unknown): void {
  console.log(safeJson(value));
}

/** A byte count for people: 1.5 KiB, 20.0 MiB, 2.00 GiB. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}
