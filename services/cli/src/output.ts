/**
 * Text from the server shown on a terminal: job names and logs are the users' own, and a name or
 * a log line could carry escape sequences that rewrite the screen, or bidirectional overrides
 * that reorder what a person reads.
 */

/** Terminal escape sequences: CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL|ST`), and the rest. */
// eslint-disable-next-line no-control-regex -- matching control characters is its purpose
const ESCAPES = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?/g;
const HIDDEN = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;
const HIDDEN_BUT_LINES = /(?![\n\t\r])[\p{Cc}\p{Cf}\u2028\u2029]|\r(?!\n)/gu;

/** A name, on one line, with nothing that could hide or reorder it. */
export function cleanName(text: string): string {
  return text.replace(ESCAPES, '').replace(HIDDEN, '');
}

/** Log text: lines and tabs kept; escape sequences, other controls and overrides dropped. */
export function cleanLog(text: string): string {
  return text.replace(ESCAPES, '').replace(HIDDEN_BUT_LINES, '');
}

/** JSON with every invisible character escaped, as JSON allows. */
export function safeJson(value: unknown): string {
  return JSON.stringify(value, null, 2).replace(
    /[\p{Cf}\u2028\u2029\x7f-\x9f]/gu,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
