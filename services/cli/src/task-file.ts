import { readFileSync, statSync } from 'node:fs';
import { isMap, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { JobSpecSchema, ResourcesSchema, type JobSpecInput } from '@trainyard/events';
import { CliError } from './errors.ts';

/** A task file's fields: a job spec as the API takes it (the same schema, unknown fields refused). */
const TaskSchema = JobSpecSchema.extend({ resources: ResourcesSchema.strict() }).strict();

/** A task file, read and checked: the spec it gives, and where in it each field is. */
export interface TaskFile {
  path: string;
  spec: JobSpecInput;
  /** `file:line` of a field (`resources.gpus`), or of the nearest field above it that is there. */
  where(field: string): string;
}

/** The largest task file read: a job's spec is a few lines. */
const MAX_TASK_FILE_BYTES = 1024 * 1024;

/**
 * Reads a task file (`trainyard.yaml`): YAML whose fields are a job spec, named `defaultName`
 * unless it says. A mistake is told with the file and line it is on, as
 * `trainyard.yaml:7: resources.gpus: ...`.
 */
export function readTaskFile(path: string, defaultName: string): TaskFile {
  let text: string;
  try {
    const info = statSync(path);
    if (!info.isFile()) throw new Error('not a regular file');
    if (info.size > MAX_TASK_FILE_BYTES) throw new Error(`over ${MAX_TASK_FILE_BYTES} bytes`);
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new CliError(`-f ${path}: ${(err as Error).message}`);
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const at = (offset: number) => `${path}:${lines.linePos(offset).line}`;
  const [syntax] = doc.errors;
  if (syntax) throw new CliError(`${at(syntax.pos[0])}: ${syntax.message.split('\n')[0]}`);
  if (!isMap(doc.contents)) {
    throw new CliError(
      `${path}:1: a task file is a mapping of a job's fields (name, command, resources, ...)`,
    );
  }
  const where = (field: string) => at(offsetOf(doc, field.split('.')));
  let raw: Record<string, unknown>;
  try {
    raw = doc.toJS() as Record<string, unknown>;
  } catch (err) {
    throw new CliError(`${path}: ${(err as Error).message}`);
  }
  const spec = { name: defaultName, ...raw };
  const checked = TaskSchema.safeParse(spec);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    const keys = 'keys' in issue ? (issue.keys as string[]) : [];
    const field = [...issue.path, ...keys.slice(0, 1)].map(String).join('.');
    throw new CliError(`${where(field)}: ${field || 'the file'}: ${issue.message}`);
  }
  return { path, spec: spec as JobSpecInput, where };
}

/** Where a field is in the file, or the nearest enclosing field: the file's start at worst. */
function offsetOf(doc: Document, path: string[]): number {
  for (let n = path.length; n > 0; n--) {
    const found = offsetOfField(doc, path.slice(0, n));
    if (found !== null) return found;
  }
  return 0;
}

type Ranged = { value?: unknown; range?: [number, number, number] } | null;

/** The offset of the key that names `path`'s last field, or of the list item it is. */
function offsetOfField(doc: Document, path: string[]): number | null {
  const parent = path.length === 1 ? doc.contents : doc.getIn(path.slice(0, -1), true);
  const last = path[path.length - 1]!;
  if (isSeq(parent)) return (parent.items[Number(last)] as Ranged)?.range?.[0] ?? null;
  if (!isMap(parent)) return null;
  for (const item of parent.items) {
    const key = item.key as Ranged;
    if (key && String(key.value) === last && key.range) return key.range[0];
  }
  return null;
}
