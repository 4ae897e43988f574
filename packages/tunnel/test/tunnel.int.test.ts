import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { connect } from '@nats-io/transport-node';
import { headers, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Subjects } from '@trainyard/events';
import { startTestNats, waitFor } from '@trainyard/testkit';
import {
  ChannelRefused,
  FRAME_BYTES,
  TunnelClient,
  serveTunnel,
  type Channel,
  type ChannelExit,
  type ChannelHost,
  type ChannelRequest,
  type ChannelTarget,
  type TunnelServer,
} from '../src/index.ts';

const RUN: ChannelTarget = { sessionId: 'ses_1', runId: 'run_1' };
const WINDOW = 256 * 1024;

/** Runs each exec channel as `sh -c`, counting the stdout bytes it hands to the tunnel. */
class SpawnHost implements ChannelHost {
  readonly children: ChildProcess[] = [];
  readonly channels: Channel[] = [];
  produced = 0;

  async open(target: ChannelTarget, request: ChannelRequest): Promise<Channel> {
    if (target.runId !== RUN.runId) throw new ChannelRefused('noSuchRun', `no run ${target.runId}`);
    if (request.kind !== 'exec') throw new ChannelRefused('refused', 'exec only');
    const child = spawn('sh', ['-c', request.command], { stdio: 'pipe' });
    this.children.push(child);
    const output = new Transform({
      highWaterMark: 1,
      transform: (chunk: Buffer, _encoding, done) => {
        this.produced += chunk.length;
        done(null, chunk);
      },
    });
    child.stdout.pipe(output);
    const exit = new Promise<ChannelExit>((resolve) =>
      child.on('close', (code, signal) =>
        resolve({ code, signal: signal?.replace(/^SIG/, '') ?? null }),
      ),
    );
    const channel: Channel = {
      input: child.stdin,
      output,
      errors: child.stderr,
      resize: () => undefined,
      signal: (name) => child.kill(`SIG${name}` as NodeJS.Signals),
      // As the runtime's channels do: the process killed, its streams let go of.
      close: () => {
        child.kill('SIGKILL');
        child.stdout.destroy();
        output.destroy();
        child.stderr.destroy();
      },
      exit,
    };
    this.channels.push(channel);
    return channel;
  }
}

const exec = (command: string): ChannelRequest => ({ kind: 'exec', command, env: {} });
const collect = async (stream: Readable) => Buffer.concat(await stream.toArray());
const exited = (child: ChildProcess) =>
  new Promise<string | null>((resolve) =>
    child.exitCode !== null || child.signalCode !== null
      ? resolve(child.signalCode)
      : child.on('exit', (_code, signal) => resolve(signal)),
  );

let nats: Awaited<ReturnType<typeof startTestNats>>;
let gatewayNc: NatsConnection;
let workerNc: NatsConnection;
let host: SpawnHost;
let server: TunnelServer;
let client: TunnelClient;
const activity: [string, number][] = [];
const warnings: string[] = [];

beforeAll(async () => {
  nats = await startTestNats();
  gatewayNc = await connect({ servers: nats.url });
  workerNc = await connect({ servers: nats.url });
  host = new SpawnHost();
  server = serveTunnel(workerNc, 'w1', host, {
    window: WINDOW,
    onActivity: (target, count) => activity.push([target.runId, count]),
    onWarning: (message) => warnings.push(message),
  });
  client = new TunnelClient(gatewayNc, { window: WINDOW, openTimeoutMs: 2_000 });
  // A worker's subscription must reach the server before the first open does.
  await workerNc.flush();
});
afterAll(async () => {
  await server.stop();
  for (const child of host.children) child.kill('SIGKILL');
  await gatewayNc.close();
  await workerNc.close();
  await nats.stop();
});

describe('the tunnel', () => {
  it('runs a command: stdout and stderr apart, and its exit code', async () => {
    activity.length = 0;
    const channel = await client.open('w1', RUN, exec('echo out; echo err >&2; exit 7'));
    const [out, err] = await Promise.all([collect(channel.output), collect(channel.errors)]);
    expect(out.toString()).toBe('out\n');
    expect(err.toString()).toBe('err\n');
    expect(await channel.exit).toEqual({ code: 7, signal: null });
    await waitFor('the channel to be let go', () => server.openChannels(RUN) === 0);
    expect(activity).toEqual([
      ['run_1', 1],
      ['run_1', 0],
    ]);
  });

  it('carries 20 MB of stdin through cat and back byte for byte', async () => {
    const data = randomBytes(20 * 1024 * 1024);
    const channel = await client.open('w1', RUN, exec('cat'));
    const chunks = Array.from({ length: 20 }, (_, i) => data.subarray(i << 20, (i + 1) << 20));
    const hash = createHash('sha256');
    let received = 0;
    await Promise.all([
      pipeline(Readable.from(chunks), channel.input),
      (async () => {
        for await (const chunk of channel.output as AsyncIterable<Buffer>) {
          received += chunk.length;
          hash.update(chunk);
        }
      })(),
      collect(channel.errors),
    ]);
    expect(received).toBe(data.length);
    expect(hash.digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
    expect(await channel.exit).toEqual({ code: 0, signal: null });
  });

  it('holds a process that writes faster than the gateway reads to one window', async () => {
    host.produced = 0;
    const total = 8 * 1024 * 1024;
    const channel = await client.open('w1', RUN, exec(`head -c ${total} /dev/zero`));
    await new Promise((r) => setTimeout(r, 800));
    expect(host.produced).toBeGreaterThanOrEqual(WINDOW);
    expect(host.produced).toBeLessThanOrEqual(WINDOW + 3 * FRAME_BYTES);
    expect(channel.output.readableLength).toBeLessThanOrEqual(WINDOW + FRAME_BYTES);
    const [out] = await Promise.all([collect(channel.output), collect(channel.errors)]);
    expect(out.length).toBe(total);
    expect(await channel.exit).toEqual({ code: 0, signal: null });
  });

  it('holds a gateway that writes faster than the process reads to one window', async () => {
    const channel = await client.open('w1', RUN, exec('sleep 30'));
    const child = host.children.at(-1)!;
    let accepted = 0;
    const chunk = Buffer.alloc(FRAME_BYTES);
    const writer = (async () => {
      for (let i = 0; i < 128; i++) {
        await new Promise<void>((resolve) => channel.input.write(chunk, () => resolve()));
        accepted += chunk.length;
      }
    })().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 800));
    // What the worker holds for the process is one window; the gateway sent that, and what
    // the kernel took into the socket to `sleep`.
    expect(child.stdin!.writableLength).toBeGreaterThan(0);
    expect(child.stdin!.writableLength).toBeLessThanOrEqual(WINDOW);
    expect(accepted).toBeGreaterThanOrEqual(WINDOW);
    expect(accepted).toBeLessThanOrEqual(WINDOW + 1024 * 1024);
    channel.close();
    await writer;
  });

  it('refuses a channel for a run the worker does not hold, with the host’s code', async () => {
    const open = client.open('w1', { sessionId: 'ses_1', runId: 'run_gone' }, exec('true'));
    await expect(open).rejects.toBeInstanceOf(ChannelRefused);
    await expect(open).rejects.toMatchObject({ code: 'noSuchRun' });
  });

  it('says a worker nobody serves is unreachable', async () => {
    const quick = new TunnelClient(gatewayNc, { openTimeoutMs: 300 });
    await expect(quick.open('w_nobody', RUN, exec('true'))).rejects.toMatchObject({
      code: 'unreachable',
    });
  });

  it('kills the process when the gateway closes the channel', async () => {
    const channel = await client.open('w1', RUN, exec('sleep 30'));
    const child = host.children.at(-1)!;
    channel.close();
    expect(await channel.exit).toEqual({ code: null, signal: null });
    expect(await exited(child)).toBe('SIGKILL');
    await waitFor('the channel to be let go', () => server.openChannels() === 0);
  });

  it('tells the gateway the exit of a channel the worker closed itself', async () => {
    const channel = await client.open('w1', RUN, exec('echo started; sleep 30'));
    let out = '';
    channel.output.on('data', (c: Buffer) => (out += c.toString()));
    channel.errors.resume();
    await waitFor('its first line', () => out === 'started\n');
    host.channels.at(-1)!.close();
    expect(await channel.exit).toEqual({ code: null, signal: 'KILL' });
    await waitFor('the channel to be let go', () => server.openChannels() === 0);
  });

  it('ends the gateway’s channels when the worker stops serving', async () => {
    const stopping = serveTunnel(workerNc, 'w2', host);
    await workerNc.flush();
    const channel = await client.open('w2', RUN, exec('sleep 30'));
    const child = host.children.at(-1)!;
    await stopping.stop();
    expect(await channel.exit).toEqual({ code: null, signal: null, error: 'stopped' });
    expect(await exited(child)).toBe('SIGKILL');
  });

  it('takes a worker that vanished without a word for lost, within a few keepalives', async () => {
    const vanishingNc = await connect({ servers: nats.url });
    const vanishing = serveTunnel(vanishingNc, 'w3', host);
    await vanishingNc.flush();
    const quick = new TunnelClient(gatewayNc, { keepaliveMs: 100 });
    const channel = await quick.open('w3', RUN, exec('sleep 30'));
    const child = host.children.at(-1)!;
    const start = Date.now();
    await vanishingNc.close();
    expect(await channel.exit).toEqual({ code: null, signal: null, error: 'lost' });
    expect(Date.now() - start).toBeLessThan(1_000);
    await Promise.all([collect(channel.output), collect(channel.errors)]);
    // The worker's side hears no pings either, and kills the process.
    expect(await exited(child)).toBe('SIGKILL');
    await vanishing.stop();
  });

  it('ignores malformed open requests, refusing those it can answer', async () => {
    const answers: Msg[] = [];
    const sub = gatewayNc.subscribe(`${Subjects.tunnelOut('w1')}.>`, {
      callback: (_err, msg) => {
        answers.push(msg);
      },
    });
    const open = `${Subjects.tunnelIn('w1')}.open`;
    warnings.length = 0;
    gatewayNc.publish(open, 'not json');
    gatewayNc.publish(open, JSON.stringify({ channelId: 'a.b', target: RUN }));
    gatewayNc.publish(open, JSON.stringify([1, 2]));
    gatewayNc.publish(open, JSON.stringify({ channelId: 'badRequest1', target: RUN }));
    gatewayNc.publish(`${Subjects.tunnelIn('w1')}.unknownChannel`, 'stray');
    await waitFor('the refusal', () => answers.length > 0);
    await gatewayNc.flush();
    await new Promise((r) => setTimeout(r, 100));
    sub.unsubscribe();
    expect(answers.map((msg) => msg.subject)).toEqual([`${Subjects.tunnelOut('w1')}.badRequest1`]);
    expect(answers[0]!.headers?.get('Ty-Kind')).toBe('refused');
    expect(answers[0]!.json()).toMatchObject({ code: 'badRequest' });
    expect(warnings).toHaveLength(3);
    const channel = await client.open('w1', RUN, exec('echo still here'));
    expect((await collect(channel.output)).toString()).toBe('still here\n');
    await collect(channel.errors);
    expect(await channel.exit).toEqual({ code: 0, signal: null });
  });

  it('ends a channel whose frames arrive out of sequence, killing its process', async () => {
    const channelId = 'handMadeChannel1';
    const frames: Msg[] = [];
    const sub = gatewayNc.subscribe(`${Subjects.tunnelOut('w1')}.${channelId}`, {
      callback: (_err, msg) => {
        frames.push(msg);
      },
    });
    gatewayNc.publish(
      `${Subjects.tunnelIn('w1')}.open`,
      JSON.stringify({ channelId, target: RUN, request: exec('sleep 30') }),
    );
    await waitFor('opened', () => frames.length > 0);
    expect(frames[0]!.headers?.get('Ty-Kind')).toBe('opened');
    const child = host.children.at(-1)!;
    const h = headers();
    h.set('Ty-Kind', 'ping');
    h.set('Ty-Seq', '1');
    gatewayNc.publish(`${Subjects.tunnelIn('w1')}.${channelId}`, '', { headers: h });
    expect(await exited(child)).toBe('SIGKILL');
    await waitFor('close', () => frames.find((msg) => msg.headers?.get('Ty-Kind') === 'close'));
    sub.unsubscribe();
    expect(frames.at(-1)!.json()).toEqual({ error: 'frame 0 lost' });
  });
});
