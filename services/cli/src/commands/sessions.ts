import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { printLog } from '../logs.ts';
import { cleanName } from '../output.ts';
import { postWithCode } from '../upload.ts';
import { callerRole, type SessionView } from '../views.ts';
import { wholeNumber } from './flags.ts';
import { inFlags } from './submit.ts';
import { printJson, printTable } from './table.ts';

/** The flag that sets each session spec field, to name in an error. */
const FLAGS: Record<string, string> = {
  name: '--name',
  team: '--team',
  fromJob: '--from-job',
  image: '--image',
  'resources.gpus': '--gpus',
  'resources.vramGb': '--vram-gb',
  'resources.cpus': '--cpus',
  'resources.memoryGb': '--memory-gb',
  'resources.gpuModel': '--gpu-model',
  'timers.connectMin': '--connect-min',
  'timers.idleMin': '--idle-min',
  'timers.maxMin': '--max-min',
};

type CreateFlags = Record<string, string | boolean | undefined>;

/** The spec `session create` sends, from its flags. */
function specFrom(o: CreateFlags) {
  const num = (flag: string, key: string) => wholeNumber(flag, o[key]);
  const timers = {
    ...(o.connectMin !== undefined && { connectMin: num('--connect-min', 'connectMin') }),
    ...(o.idleMin !== undefined && { idleMin: num('--idle-min', 'idleMin') }),
    ...(o.maxMin !== undefined && { maxMin: num('--max-min', 'maxMin') }),
  };
  return {
    ...(o.name !== undefined && { name: o.name as string }),
    ...(o.team !== undefined && { team: o.team as string }),
    ...(o.fromJob !== undefined && { fromJob: o.fromJob as string }),
    ...(o.image !== undefined && { image: o.image as string }),
    resources: {
      gpus: num('--gpus', 'gpus') ?? 0,
      ...(o.vramGb !== undefined && { vramGb: num('--vram-gb', 'vramGb') }),
      ...(o.cpus !== undefined && { cpus: num('--cpus', 'cpus') }),
      ...(o.memoryGb !== undefined && { memoryGb: num('--memory-gb', 'memoryGb') }),
      ...(o.gpuModel !== undefined && { gpuModel: o.gpuModel as string }),
    },
    timers,
  };
}

type Created = { id: string; status: string; seq: number };

/** Requests a session; with `dir`, the spec is checked first, then sent with the packed code. */
async function request(
  client: ApiClient,
  spec: unknown,
  dir: string | undefined,
): Promise<Created> {
  if (dir === undefined) return client.post<Created>('/v1/sessions', spec);
  const root = resolve(dir);
  const info = await stat(root).catch(() => null);
  if (!info?.isDirectory()) throw new CliError(`${dir} is not a directory`);
  await client.post('/v1/sessions?dryRun=true', spec);
  return postWithCode<Created>(client, '/v1/sessions', root, spec);
}

const ENDED = new Set(['stopped', 'failed']);

/** Why a session ended, in a few words. */
function endLine(s: SessionView): string {
  if (s.failure) return `failed: ${s.failure.reason}: ${cleanName(s.failure.message)}`;
  return s.stopReason ? `stopped (${s.stopReason})` : s.status;
}

/**
 * Waits until a session runs, telling each status on stderr, and the build of its image as it
 * goes; fails if it ends first.
 */
async function untilRunning(client: ApiClient, id: string, seq: number): Promise<SessionView> {
  let said = '';
  let after = seq;
  let buildShown = false;
  for (;;) {
    const s = await client.json<SessionView>(
      `/v1/sessions/${encodeURIComponent(id)}?after=${after}`,
    );
    after = s.seq;
    const line = `${id} ${s.status}${s.requeuedBecause ? ` (placed again: ${cleanName(s.requeuedBecause)})` : ''}`;
    // Told again when the reason it waits changes, not its counts.
    const now = `${line} ${s.pendingReason ?? ''}`;
    if (now !== said)
      console.error(s.pendingMessage ? `${line}: ${cleanName(s.pendingMessage)}` : line);
    said = now;
    if (s.status === 'building' && !buildShown) {
      buildShown = true;
      const write = (text: string) => void process.stderr.write(text);
      // The build's log is shown as a courtesy: without it, the wait goes on all the same.
      await printLog(client, id, { of: 'session', follow: true, write }).catch((err: unknown) =>
        console.error(`(the build's log could not be shown: ${(err as Error).message})`),
      );
      continue;
    }
    if (s.status === 'running') return s;
    if (ENDED.has(s.status))
      throw new CliError(`${id} ended before it ran: ${endLine(s)}`, 'SESSION_ENDED');
    await sleep(1000);
  }
}

function resourcesLine(s: SessionView): string {
  const r = s.resources;
  const parts = [r.gpus > 0 ? `${r.gpus} GPU${r.gpus > 1 ? 's' : ''}` : 'no GPU'];
  if (r.gpuModel) parts.push(`model ${r.gpuModel}`);
  if (r.vramGb !== undefined) parts.push(`${r.vramGb} GiB VRAM each`);
  if (r.cpus !== undefined) parts.push(`${r.cpus} CPU slots`);
  if (r.memoryGb !== undefined) parts.push(`${r.memoryGb} GiB memory`);
  return parts.join(', ');
}

function printSession(s: SessionView): void {
  console.log(`${s.id}  ${cleanName(s.name ?? '-')}  ${s.status}`);
  console.log(
    `owner ${s.owner}  requested ${s.requestedAt}  started ${s.startedAt ?? '-'}  connected ${s.connectedAt ?? '-'}  ended ${s.endedAt ?? '-'}`,
  );
  const where = s.workerId ? `  on ${s.workerId} (${s.gpus.join(',') || 'cpu'})` : '';
  console.log(`resources: ${resourcesLine(s)}${where}`);
  if (s.fromJob) console.log(`image: of ${s.fromJob} (${s.imageDigest ?? '-'})`);
  else if (s.image) console.log(`image: built on ${s.image} (${s.imageDigest ?? 'not yet'})`);
  const t = s.timers;
  console.log(
    `timers: connect ${t.connectMin} min, idle ${t.idleMin} min, max ${t.maxMin} min${s.stopsAt ? `; stops at ${s.stopsAt} unless used` : ''}`,
  );
  if (s.requeuedBecause) console.log(`placed again: ${cleanName(s.requeuedBecause)}`);
  if (s.pendingMessage) console.log(`waiting: ${cleanName(s.pendingMessage)}`);
  if (ENDED.has(s.status) || s.status === 'stopping') console.log(endLine(s));
}

/** `trainyard session create|ls|show|stop`. */
export function registerSessionCommands(program: Command): void {
  const session = program
    .command('session')
    .description('interactive sessions: a shell on a worker, reached with `trainyard ssh`');

  session
    .command('create')
    .description('ask for a session; prints its id')
    .argument('[dir]', "a code directory to unpack in the session's home (as submit packs it)")
    .option('--name <name>', 'a name to know it by (an ssh-config host alias)')
    .option('--team <name>', 'the team of yours to charge it to (default: the first you joined)')
    .option(
      '--image <ref>',
      'build its image on this base (e.g. python), with the code and its requirements.txt',
    )
    .option(
      '--from-job <id>',
      "run it in a container of one of your jobs' image (its code and requirements)",
    )
    .option('--gpus <n>', 'GPUs (0 = CPU only)', '0')
    .option('--vram-gb <gb>', 'VRAM per GPU, in GiB')
    .option('--gpu-model <model>', 'only GPUs whose name holds this, e.g. A100 (any case)')
    .option('--cpus <n>', "CPU-only sessions: how many of the worker's CPU slots it takes")
    .option(
      '--memory-gb <gb>',
      'a hard memory limit, in GiB, for a session in a container (--image, --from-job)',
    )
    .option('--connect-min <m>', 'stop it if no one logs in this many minutes after it starts')
    .option('--idle-min <m>', 'stop it after this many minutes with no connection open')
    .option('--max-min <m>', 'stop it this many minutes after it starts, whatever happens')
    .option('--follow-until-running', 'wait until it runs, telling its status on stderr')
    .option('--json', 'print JSON')
    .action(async (dir: string | undefined, o: CreateFlags) => {
      const client = ApiClient.fromEnv();
      const created = await request(client, specFrom(o), dir).catch((err: unknown) => {
        throw err instanceof CliError && err.code === 'VALIDATION_FAILED'
          ? inFlags(err, FLAGS)
          : err;
      });
      if (!o.followUntilRunning) return o.json ? printJson(created) : console.log(created.id);
      if (!o.json) console.log(created.id);
      const running = await untilRunning(client, created.id, created.seq);
      if (o.json) printJson(running);
      else console.error(`connect with: trainyard ssh ${created.id}`);
    });

  session
    .command('ls')
    .description('list your sessions, newest first')
    .option('--all', "admins: everyone's")
    .option('--json', 'print JSON')
    .action(async (o: { all?: boolean; json?: boolean }) => {
      const client = ApiClient.fromEnv();
      const list = await client.json<SessionView[]>(`/v1/sessions${o.all ? '?all=true' : ''}`);
      if (o.json) return printJson(list);
      const owners = Boolean(o.all) && callerRole(client.token) === 'admin';
      printTable(
        ['ID', ...(owners ? ['OWNER'] : []), 'NAME', 'STATUS', 'GPUS', 'REQUESTED', 'STOPS/ENDED'],
        list.map((s) => [
          s.id,
          ...(owners ? [s.owner] : []),
          s.name ?? '',
          s.status,
          String(s.resources.gpus),
          s.requestedAt,
          s.endedAt ?? s.stopsAt ?? '',
        ]),
      );
    });

  session
    .command('show')
    .description('show a session')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const s = await ApiClient.fromEnv().json<SessionView>(
        `/v1/sessions/${encodeURIComponent(id)}`,
      );
      if (o.json) return printJson(s);
      printSession(s);
    });

  session
    .command('logs')
    .description('print the build of a session’s image (for a session with --image)')
    .argument('<id>')
    .option('-f, --follow', 'stream it until the build ends')
    .option('--raw', 'print it as written, escape sequences and all')
    .action(async (id: string, o: { follow?: boolean; raw?: boolean }) => {
      await printLog(ApiClient.fromEnv(), id, {
        of: 'session',
        follow: o.follow === true,
        raw: o.raw === true,
      });
    });

  session
    .command('stop')
    .description('stop a session: its shells end and its slot is freed')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().post<{ id: string; status: string }>(
        `/v1/sessions/${encodeURIComponent(id)}/stop`,
        {},
      );
      if (o.json) return printJson(r);
      console.log(`${r.id} ${r.status === 'stopped' ? 'stopped' : 'stopping'}`);
    });
}
