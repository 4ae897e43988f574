import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { cleanName } from '../output.ts';
import { runSsh } from '../ssh.ts';
import { SERVICE_TEMPLATES, templateSpec, type TemplateOptions } from '../service-templates.ts';
import { postWithCode } from '../upload.ts';
import type { JobView } from '../views.ts';
import { wholeNumber } from './flags.ts';
import { connect } from './ssh.ts';
import { directory, inFlags } from './submit.ts';
import { printJson, printTable } from './table.ts';

/** A service, or a clear word that `id` is a job of another kind. */
async function serviceJob(client: ApiClient, id: string, otherwise: string): Promise<JobView> {
  const job = await client.json<JobView>(`/v1/jobs/${encodeURIComponent(id)}`);
  if (job.kind !== 'service')
    throw new CliError(`${id} is not a service: ${otherwise}`, 'NOT_A_SERVICE');
  return job;
}

/** A running service's ports, or a clear word on why it has none to reach. */
async function runningPorts(client: ApiClient, id: string): Promise<number[]> {
  const job = await serviceJob(
    client,
    id,
    `\`trainyard ssh ${id}\` opens a shell beside a running job`,
  );
  const ports = job.attempts?.at(-1)?.ports ?? [];
  if (job.status !== 'running' || ports.length === 0) {
    throw new CliError(
      `service ${id} is ${job.status}, not running: \`trainyard status ${id}\` says why`,
      'NOT_RUNNING',
    );
  }
  return ports;
}

/** How often `service open` looks whether the service still runs where it forwards to. */
const WATCH_MS = 3_000;

/**
 * Aborts once the service no longer runs the attempt that had `ports` (it stopped, or started
 * again elsewhere, on other ports), saying so; a moment's silence of the API is waited out.
 */
function watchService(client: ApiClient, id: string, ports: number[]): AbortController {
  const gone = new AbortController();
  const look = async () => {
    const job = await client.json<JobView>(`/v1/jobs/${encodeURIComponent(id)}`).catch(() => null);
    const now = job?.attempts?.at(-1)?.ports ?? [];
    if (job && (job.status !== 'running' || now.join() !== ports.join())) {
      console.error(
        job.status === 'running'
          ? `service ${id} started again, on port ${now[0]}: the forward ends; \`trainyard service open ${id}\` opens it anew`
          : `service ${id} is ${job.status}: the forward ends`,
      );
      process.exitCode = 1;
      gone.abort();
      return;
    }
    timer = setTimeout(() => void look(), WATCH_MS);
  };
  let timer = setTimeout(() => void look(), WATCH_MS);
  gone.signal.addEventListener('abort', () => clearTimeout(timer));
  return gone;
}

/** Forwards a local port to a running service's port through the gateway, until Ctrl-C. */
async function openService(id: string, o: { port?: string; local?: string }): Promise<void> {
  const client = ApiClient.fromEnv();
  const ports = await runningPorts(client, id);
  const index = wholeNumber('--port', o.port) ?? 0;
  const port = ports[index];
  if (port === undefined || !Number.isInteger(index)) {
    throw new CliError(`--port: service ${id} has ports 0 to ${ports.length - 1}`);
  }
  const local = wholeNumber('--local', o.local) ?? port;
  if (!Number.isInteger(local) || local < 1 || local > 65535) {
    throw new CliError('--local: a port number from 1 to 65535');
  }
  const info = await connect(client, id);
  console.error(
    `http://127.0.0.1:${local} reaches service ${id} (its port ${port}) through the gateway; Ctrl-C ends it`,
  );
  const watch = watchService(client, id, ports);
  try {
    const status = await runSsh({
      gateway: info,
      username: info.username,
      password: info.password,
      command: [],
      options: [
        '-N',
        '-o',
        'ExitOnForwardFailure=yes',
        '-L',
        `127.0.0.1:${local}:localhost:${port}`,
      ],
      signal: watch.signal,
    });
    if (!watch.signal.aborted) process.exitCode = status;
  } finally {
    watch.abort();
  }
}

type CreateFlags = Record<string, string | boolean | undefined>;

/** The flag of `service create` that sets each spec field, to name in an error. */
const FLAGS: Record<string, string> = {
  name: '--name',
  image: '--image',
  'resources.gpus': '--gpus',
  'resources.vramGb': '--vram-gb',
  'env.TRAINYARD_MODEL': '--model',
};

/** `service create TEMPLATE [DIR]`: the template's spec, with the code of DIR if given. */
async function createService(template: string, dir: string | undefined, o: CreateFlags) {
  const given: TemplateOptions = {
    ...(typeof o.name === 'string' && { name: o.name }),
    ...(o.gpus !== undefined && { gpus: wholeNumber('--gpus', o.gpus) }),
    ...(o.vramGb !== undefined && { vramGb: wholeNumber('--vram-gb', o.vramGb) }),
    ...(typeof o.model === 'string' && { model: o.model }),
    ...(typeof o.image === 'string' && { image: o.image }),
    ...(o.host === true && { image: null }),
  };
  const spec = templateSpec(template, given);
  const root = dir === undefined ? undefined : await directory(dir);
  if (o.dryRun) return printJson(spec);
  const client = ApiClient.fromEnv();
  const told = (err: unknown) => {
    throw err instanceof CliError && err.code === 'VALIDATION_FAILED' ? inFlags(err, FLAGS) : err;
  };
  await client.post('/v1/jobs?dryRun=true', spec).catch(told);
  const created =
    root === undefined
      ? await client.post<{ id: string }>('/v1/jobs', spec)
      : await postWithCode<{ id: string }>(client, '/v1/jobs', root, spec);
  if (o.json) printJson(created);
  else console.log(created.id);
  console.error(
    `once it runs, \`trainyard service open ${created.id}\` forwards it to this machine: ${SERVICE_TEMPLATES[template]!.reach('http://127.0.0.1:PORT')}`,
  );
}

/** `trainyard service`: long-running jobs (notebooks, inference servers) reached through the gateway. */
export function registerServiceJobCommands(program: Command): void {
  const service = program
    .command('service')
    .description(
      'services: jobs that run until stopped, on ports of their own, reached with `service open` (submit your own with `submit --service`)',
    );

  service
    .command('create')
    .description(
      `start a service from a template: ${Object.entries(SERVICE_TEMPLATES)
        .map(([name, t]) => `${name} (${t.description})`)
        .join('; ')}`,
    )
    .argument('<template>', Object.keys(SERVICE_TEMPLATES).join(' or '))
    .argument('[dir]', 'code to put in its working directory')
    .option('--name <name>', 'a name to know it by')
    .option('--gpus <n>', 'GPUs it holds (jupyter: 0, inference: 1)')
    .option('--vram-gb <gb>', 'VRAM per GPU, in GiB (default: each GPU whole)')
    .option('--model <id>', 'inference: the model to serve (a Hugging Face id, or a path in DIR)')
    .option('--image <image>', 'the base image (jupyter: python, inference: vllm/vllm-openai)')
    .option('--host', "run on a worker's host, not in a container: the tools must be there")
    .option('--dry-run', 'print the spec it would submit, and submit nothing')
    .option('--json', 'print JSON')
    .action(createService);

  service
    .command('ls')
    .description("your services, newest first (admins: everyone's); the newest 500")
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const listed = await ApiClient.fromEnv().json<JobView[]>('/v1/jobs?kind=service&limit=500');
      const jobs = listed.filter((j) => j.kind === 'service');
      if (o.json) return printJson(jobs);
      printTable(
        ['ID', 'NAME', 'STATUS', 'GPUS', 'CREATED'],
        jobs.map((j) => [j.id, cleanName(j.name), j.status, String(j.resources.gpus), j.createdAt]),
      );
    });

  service
    .command('open')
    .description(
      "forward a local port to a running service's port through the SSH gateway (your registered key, else a one-time password)",
    )
    .argument('<id>', 'the service (job_…)')
    .option('--port <index>', 'which of its ports, from 0', '0')
    .option('--local <port>', 'the local port (default: the same number as the service’s)')
    .action(openService);

  service
    .command('stop')
    .description('stop a service (it ends as cancelled)')
    .argument('<id>')
    .action(async (id: string) => {
      const client = ApiClient.fromEnv();
      await serviceJob(client, id, `\`trainyard cancel ${id}\` cancels a job`);
      const r = await client.post<{ id: string; status: string }>(
        `/v1/jobs/${encodeURIComponent(id)}/cancel`,
        {},
      );
      console.log(`${r.id} ${r.status === 'cancelled' ? 'stopped' : 'stopping'}`);
    });
}
