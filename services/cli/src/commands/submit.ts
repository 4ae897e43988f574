import { readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, dirname, resolve, sep } from 'node:path';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { exitStatusOf, outcomeLine, printLog } from '../logs.ts';
import { planPack, type PackPlan } from '../pack.ts';
import { readTaskFile, type TaskFile } from '../task-file.ts';
import { postWithCode } from '../upload.ts';
import { wholeNumber } from './flags.ts';
import { bytes, printJson } from './table.ts';

const collect = (value: string, previous: string[]) => [...previous, value];

function parseEnv(pairs: string[], from = '--env'): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const i = pair.indexOf('=');
    if (i <= 0) throw new CliError(`${from} wants NAME=VALUE, got "${pair}"`);
    env[pair.slice(0, i)] = pair.slice(i + 1);
  }
  return env;
}

/**
 * `NAME=VALUE` lines from a file, `#` comments and blank lines skipped: secrets given this way
 * stay off the command line, which other processes on the host can read.
 */
function envFile(path: string): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new CliError(`--env-file ${path}: ${(err as Error).message}`);
  }
  const lines = text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  return parseEnv(lines, `--env-file ${path}`);
}

/** `--time-limit`: whole seconds as a number, anything else as the duration the API reads. */
function durationFlag(value: string): number | string {
  return /^\d+$/.test(value.trim()) ? Number(value) : value;
}

export type SubmitFlags = Record<string, string | string[] | boolean | undefined>;

/** The spec `submit` sends, from its flags. */
function specFrom(root: string, o: SubmitFlags) {
  const num = (flag: string, key: string) => wholeNumber(flag, o[key]);
  return {
    name: (o.name as string | undefined) ?? root.split(sep).pop() ?? 'job',
    command: o.command as string,
    ...(o.setup ? { setup: o.setup } : {}),
    ...(o.image !== undefined && { image: o.image as string }),
    resources: {
      gpus: num('--gpus', 'gpus') ?? 0,
      ...(o.vramGb !== undefined && { vramGb: num('--vram-gb', 'vramGb') }),
      ...(o.cpus !== undefined && { cpus: num('--cpus', 'cpus') }),
      ...(o.gpuModel !== undefined && { gpuModel: o.gpuModel as string }),
      ...(o.memoryGb !== undefined && { memoryGb: num('--memory-gb', 'memoryGb') }),
    },
    ...(o.priority !== undefined && { priority: num('--priority', 'priority') }),
    ...(o.team !== undefined && { team: o.team as string }),
    ...(o.maxRetries !== undefined && { maxRetries: num('--max-retries', 'maxRetries') }),
    ...(o.timeLimit !== undefined && { timeLimit: durationFlag(o.timeLimit as string) }),
    ...(o.preemptible === true && { preemptible: true }),
    ...(o.shards !== undefined && { shards: num('--shards', 'shards') }),
    ...(o.nodes !== undefined && { nodes: num('--nodes', 'nodes') }),
    ...serviceFrom(o),
    ...((o.dependsOn as string[] | undefined)?.length && { dependsOn: o.dependsOn as string[] }),
    env: {
      ...(o.envFile ? envFile(o.envFile as string) : {}),
      ...parseEnv((o.env as string[]) ?? []),
    },
  };
}

/** A service's fields, from `--service`, `--ports` and `--health-http` or `--health-cmd`. */
function serviceFrom(o: SubmitFlags) {
  if (o.healthHttp !== undefined && o.healthCmd !== undefined) {
    throw new CliError('--health-http and --health-cmd: a service has one health check, not both');
  }
  const health =
    o.healthHttp !== undefined
      ? { http: o.healthHttp as string }
      : o.healthCmd !== undefined
        ? { command: o.healthCmd as string }
        : undefined;
  return {
    ...(o.service === true && { kind: 'service' }),
    ...(o.ports !== undefined && { ports: wholeNumber('--ports', o.ports) }),
    ...(health && { health }),
  };
}

/** The flag that sets each spec field, to name in an error. */
const FLAGS: Record<string, string> = {
  name: '--name',
  command: '--command',
  setup: '--setup',
  'resources.gpus': '--gpus',
  'resources.vramGb': '--vram-gb',
  'resources.cpus': '--cpus',
  'resources.gpuModel': '--gpu-model',
  'resources.memoryGb': '--memory-gb',
  image: '--image',
  priority: '--priority',
  team: '--team',
  maxRetries: '--max-retries',
  timeLimit: '--time-limit',
  preemptible: '--preemptible',
  shards: '--shards',
  nodes: '--nodes',
  kind: '--service',
  ports: '--ports',
  health: '--health-http or --health-cmd',
  'health.http': '--health-http',
  'health.command': '--health-cmd',
  dependsOn: '--depends-on',
  env: '--env',
};

/** The API's complaint about a spec field, told in the flag that sets it. */
export function inFlags(err: CliError, flags: Record<string, string> = FLAGS): CliError {
  const field = /^(?:spec\.)?([\w.]+): /.exec(err.message)?.[1];
  const flag =
    field &&
    (flags[field] ??
      flags[field.replace(/\.\d+$/, '')] ??
      (field.startsWith('env.') ? '--env' : undefined));
  if (!flag) return err;
  const said = err.message
    .slice(err.message.indexOf(': ') + 2)
    .replace(/ \(VALIDATION_FAILED\)$/, '');
  return new CliError(`${flag}: ${said}`, err.code);
}

function printPlan(root: string, plan: PackPlan): void {
  console.log(`would upload ${plan.files.length} files (${bytes(plan.bytes)}) from ${root}:`);
  for (const f of plan.files) console.log(`  ${f}`);
  if (plan.leftOut.length > 0) {
    console.log(`left out:`);
    for (const l of plan.leftOut) console.log(`  ${l.path}  (${l.source})`);
  }
}

/** Packs a directory, uploads it with a spec built from `o`, and returns the API's answer. */
export async function submitDirectory(
  client: ApiClient,
  dir: string,
  o: SubmitFlags,
): Promise<{ id: string; status: string; seq: number }> {
  const root = await directory(dir);
  return submitSpec(client, root, specFrom(root, o), inFlags, Boolean(o.hold));
}

/** A directory's absolute path; anything else is refused. */
export async function directory(dir: string): Promise<string> {
  const root = resolve(dir);
  const info = await stat(root).catch(() => null);
  if (!info?.isDirectory()) throw new CliError(`${dir} is not a directory`);
  return root;
}

/**
 * Has the API check a spec, then packs `root` and uploads it with the spec. `told` says the
 * API's complaint about a field where the user gave it: a flag, or a line of a task file.
 */
async function submitSpec(
  client: ApiClient,
  root: string,
  spec: object,
  told: (err: CliError) => CliError,
  hold: boolean,
): Promise<{ id: string; status: string; seq: number }> {
  await client.post('/v1/jobs?dryRun=true', spec).catch((err: unknown) => {
    throw err instanceof CliError && err.code === 'VALIDATION_FAILED' ? told(err) : err;
  });
  return postWithCode(client, hold ? '/v1/jobs?hold=true' : '/v1/jobs', root, spec);
}

/** The API's complaint about a spec field, told at the line of the task file that gives it. */
function inTaskFile(task: TaskFile): (err: CliError) => CliError {
  return (err) => {
    const field = /^(?:spec\.)?([\w.]+): /.exec(err.message)?.[1];
    if (!field) return err;
    const said = err.message
      .slice(err.message.indexOf(': ') + 2)
      .replace(/ \(VALIDATION_FAILED\)$/, '');
    return new CliError(`${task.where(field)}: ${field}: ${said}`, err.code);
  };
}

/** The flags that give a spec field, which a task file gives instead. */
const SPEC_FLAGS = [
  'command',
  'name',
  'gpus',
  'vramGb',
  'gpuModel',
  'cpus',
  'image',
  'memoryGb',
  'setup',
  'priority',
  'team',
  'maxRetries',
  'timeLimit',
  'preemptible',
  'shards',
  'nodes',
  'service',
  'ports',
  'healthHttp',
  'healthCmd',
  'dependsOn',
];

/**
 * `submit -f FILE [DIR]`: the spec from the task file, the code from DIR or the file's
 * directory. `--env` and `--env-file` add to its `env`, so that secrets stay out of the file
 * (which is uploaded with the code, and often committed).
 */
async function submitTask(dir: string | undefined, o: SubmitFlags, given: string[]): Promise<void> {
  const file = o.file as string;
  if ((await stat(file).catch(() => null))?.isDirectory()) {
    throw new CliError(
      `-f ${file} is a directory: -f names a task file (trainyard.yaml); --follow has no short form`,
    );
  }
  const clash = given.filter((f) => SPEC_FLAGS.includes(f));
  if (clash.length > 0) {
    const flag = `--${clash[0]!.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    throw new CliError(`${flag}: the task file ${file} gives the job's spec; give it there`);
  }
  const root = await directory(dir ?? dirname(resolve(file)));
  const task = readTaskFile(file, basename(root) || 'job');
  const extra = {
    ...(o.envFile ? envFile(o.envFile as string) : {}),
    ...parseEnv((o.env as string[]) ?? []),
  };
  const twice = Object.keys(extra).find((name) => name in (task.spec.env ?? {}));
  if (twice) throw new CliError(`--env ${twice}: the task file ${file} sets it too`);
  const spec = { ...task.spec, env: { ...task.spec.env, ...extra } };
  if (o.dryRun) return printPlan(root, planPack(root));
  const client = ApiClient.fromEnv();
  await announce(
    client,
    await submitSpec(client, root, spec, inTaskFile(task), Boolean(o.hold)),
    o,
    spec.shards,
  );
}

/**
 * Prints a submitted job's id (or JSON), and follows its log with `--follow` (an array job's log
 * is its build's: it says where its shards' are).
 */
async function announce(
  client: ApiClient,
  job: { id: string },
  o: SubmitFlags,
  shards?: number,
): Promise<void> {
  if (o.json) printJson(job);
  else console.log(job.id);
  if (o.hold) console.error(`${job.id} is held: \`trainyard release ${job.id}\` lets it queue`);
  if (shards)
    console.error(
      `an array job of ${shards} shards, ${job.id}_0 … ${job.id}_${shards - 1}: \`trainyard logs ${job.id}_0\` shows one's log, \`trainyard status ${job.id}\` how they stand`,
    );
  if (o.follow) await followToEnd(client, job.id, Boolean(o.json));
}

/** Follows a job's log to its end; prints the outcome on stderr and sets the exit status. */
export async function followToEnd(client: ApiClient, id: string, json = false): Promise<void> {
  const end = await printLog(client, id, { follow: true, json });
  console.error(outcomeLine(id, end));
  process.exitCode = exitStatusOf(end);
}

async function submit(dir: string | undefined, o: SubmitFlags, given: string[]): Promise<void> {
  if (o.file) return submitTask(dir, o, given);
  if (dir === undefined) throw new CliError('submit needs the code directory, or -f TASK_FILE');
  if (!o.command) throw new CliError('submit needs --command, or -f TASK_FILE');
  if (o.dryRun) {
    const root = resolve(dir);
    specFrom(root, o);
    return printPlan(root, planPack(root));
  }
  const client = ApiClient.fromEnv();
  const shards = o.shards === undefined ? undefined : Number(o.shards);
  await announce(client, await submitDirectory(client, dir, o), o, shards);
}

/** `trainyard submit`: a directory with flags, or a task file. */
export function registerSubmitCommand(program: Command): void {
  program
    .command('submit')
    .description(
      'package DIR (minus what .gitignore and .trainyardignore leave out) and submit it; or submit the job a task file describes (-f)',
    )
    .argument('[dir]', 'the code directory to upload (with -f: the task file’s own, by default)')
    .option(
      '-f, --file <task-file>',
      'the job as a YAML task file (trainyard.yaml): the fields of the API’s job spec',
    )
    .option('--command <cmd>', 'the command to run in the code directory')
    .option('--name <name>', 'job name (default: the directory name)')
    .option('--gpus <n>', 'GPUs needed (0 = CPU only; default 0)')
    .option('--vram-gb <gb>', 'VRAM per GPU, in GiB')
    .option('--gpu-model <model>', 'only GPUs whose name holds this, e.g. A100 (any case)')
    .option(
      '--cpus <n>',
      "CPU-only jobs: how many of the worker's CPU slots it takes (not a limit)",
    )
    .option(
      '--image <ref>',
      'run in a container built on this base image (python: the default base); where the cluster runs containers',
    )
    .option(
      '--memory-gb <gb>',
      'a hard memory limit, in GiB (the job goes to a worker that holds it)',
    )
    .option(
      '--setup <cmd>',
      'a setup command: run on the worker before the command, or once in the image build',
    )
    .option('--priority <n>', 'higher runs first')
    .option('--team <name>', 'the team of yours to charge it to (default: the first you joined)')
    .option(
      '--max-retries <n>',
      'retries after platform failures (a service: quick ends in a row before it is given up on)',
    )
    .option(
      '--time-limit <duration>',
      'stop an attempt that runs longer (90s, 45m, 2h, 1h30m; at most 30d): the job fails as timeLimit',
    )
    .option(
      '--preemptible',
      'work of a higher priority may stop it (SIGTERM, then SIGKILL) to take its place; it is queued again without spending a retry and resumes from its synced outputs with TRAINYARD_RESUMED=1',
    )
    .option(
      '--shards <n>',
      'an array job: run the command as N shards, each a job of its own (ID_0 … ID_N-1) with TRAINYARD_SHARD_INDEX and TRAINYARD_SHARD_COUNT; it succeeds when all do',
    )
    .option(
      '--nodes <n>',
      'a gang job: run the command on N workers at once, all or none, with WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for torchrun; --gpus and the rest are per worker',
    )
    .option(
      '--service',
      'a service: it runs until stopped (`trainyard service stop`), on a port of its own ($TRAINYARD_PORT), started again whenever it ends; reach it with `trainyard service open`',
    )
    .option('--ports <n>', 'a service: how many ports it is given (1 to 8; $TRAINYARD_PORTS)')
    .option(
      '--health-http <path>',
      'a service: GET this path on its port every 15 s; after 3 failures in a row (past a 5 min grace) it is started again',
    )
    .option('--health-cmd <cmd>', 'a service: a command that exits 0 while it is healthy')
    .option(
      '--depends-on <id>',
      'start only after this job succeeds; fail if it fails (repeatable)',
      collect,
      [],
    )
    .option('--env <NAME=VALUE>', 'an environment variable (repeatable)', collect, [])
    .option('--env-file <file>', 'NAME=VALUE lines: secrets that stay off the command line')
    .option('--hold', 'submit it held: it does not start until `trainyard release ID`')
    .option('--follow', "follow the log; exit with the job's outcome")
    .option('--dry-run', 'show what would be uploaded and what is left out, and send nothing')
    .option('--json', 'print JSON')
    .action(async (dir: string | undefined, o: SubmitFlags, cmd: Command) =>
      submit(
        dir,
        o,
        Object.keys(o).filter((k) => cmd.getOptionValueSource(k) === 'cli'),
      ),
    );
}
