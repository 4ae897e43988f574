import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { findNatsServer, startNatsServer, workerPermissions } from '../src/index.ts';
import { workerInbox } from '@trainyard/service-kit';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-nats-server-');
});
afterAll(async () => {
  await dir.remove();
});

const CONTROL = { user: 'control', password: 'control-password' };

/** A worker's login, as `setWorkers` takes it. */
const workerLogin = (name: string) => ({
  user: name,
  password: `${name}-password`,
  permissions: workerPermissions(name),
});

/** Connects as worker `name`, as a worker does: its own inbox prefix, no reconnecting. */
const connectWorker = (url: string, name: string) =>
  connect({
    servers: url,
    user: name,
    pass: `${name}-password`,
    inboxPrefix: workerInbox(name),
    reconnect: false,
  });

describe('the embedded nats-server with logins', () => {
  it('keeps the streams of a store made before the control plane had an account', async () => {
    const open = await startNatsServer({ dir: dir.path });
    const before = await connect({ servers: open.url });
    await jetstreamManager(before).then((jsm) =>
      jsm.streams.add({ name: 'KEPT', subjects: ['kept.>'] }),
    );
    await jetstream(before).publish('kept.one', 'history');
    await before.close();
    await open.stop();

    const server = await startNatsServer({ dir: dir.path, users: [CONTROL] });
    try {
      const nc = await connect({ servers: server.url, user: CONTROL.user, pass: CONTROL.password });
      const jsm = await jetstreamManager(nc);
      const kept = await jsm.streams.getMessage('KEPT', { last_by_subj: 'kept.one' });
      expect(kept?.string()).toBe('history');
      await nc.close();
    } finally {
      await server.stop();
    }
  });

  it('resolves setWorkers only once the server has reloaded, however long the reload takes', async () => {
    // A nats-server that takes its time over each reload: the signal reaches it half a second late.
    const slow = join(dir.path, 'slow-nats-server');
    await writeFile(
      slow,
      [
        '#!/bin/sh',
        `[ "$1" = -t ] && exec ${findNatsServer()} "$@"`,
        `${findNatsServer()} "$@" & server=$!`,
        'trap \'sleep 0.5; kill -HUP "$server"\' HUP',
        'trap \'kill -TERM "$server"\' TERM',
        'while kill -0 "$server" 2>/dev/null; do wait "$server"; done',
        '',
      ].join('\n'),
      { mode: 0o755 },
    );
    const server = await startNatsServer({
      dir: join(dir.path, 'slow'),
      binary: slow,
      users: [CONTROL],
    });
    try {
      await server.setWorkers([workerLogin('w9')]);
      const w9 = await connectWorker(server.url, 'w9');
      await w9.close();
    } finally {
      await server.stop();
    }
  });

  it('lets a worker added by reload in once setWorkers resolves, with its account’s imports wired, and closes it when removed', async () => {
    const server = await startNatsServer({ dir: dir.path, users: [CONTROL] });
    try {
      const nc = await connect({ servers: server.url, user: CONTROL.user, pass: CONTROL.password });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'HB', subjects: ['ty.hb.*'] });
      const worker = workerLogin('w1');
      await expect(
        connect({
          servers: server.url,
          user: worker.user,
          pass: worker.password,
          reconnect: false,
        }),
      ).rejects.toThrow(/authorization/i);
      await server.setWorkers([worker]);
      const w1 = await connectWorker(server.url, 'w1');
      const ack = await jetstream(w1).publish('ty.hb.w1', 'beat');
      expect(ack.stream).toBe('HB');
      // Each worker added logs in the moment its reload resolves, however quick the reload.
      const added = [worker];
      for (const name of ['w2', 'w3', 'w4', 'w5']) {
        added.push(workerLogin(name));
        await server.setWorkers([...added]);
        const nc = await connectWorker(server.url, name);
        const beat = await jetstream(nc).publish(`ty.hb.${name}`, 'beat');
        expect(beat.stream).toBe('HB');
        await nc.close();
      }

      await server.setWorkers([]);
      const ended = await Promise.race([
        w1.closed().then(() => 'closed'),
        new Promise((r) => setTimeout(() => r('still open'), 5_000)),
      ]);
      expect(ended).toBe('closed');
      await nc.close();
    } finally {
      await server.stop();
    }
  });
});
