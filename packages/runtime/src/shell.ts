/** `value` as one shell word, quoted so that the shell reads it back unchanged. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`;
}
