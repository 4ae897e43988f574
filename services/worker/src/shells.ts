import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Runtime, RunSpec } from '@trainyard/runtime';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';

/**
 * The shells beside one attempt (`trainyard ssh JOB_ID`), open or still opening, so that all are
 * closed as it ends. The first leaves a marker in the attempt's directory: its user's processes
 * may then live outside the attempt's PID namespace, and the marker outlives a restart of the
 * worker, which ends them when it releases the uid.
 */
export class Shells {
  readonly #opening = new Set<Promise<Channel | null>>();

  constructor(private readonly dir: string) {}

  /** Whether a shell was ever opened beside the attempt, by this run of the worker or another. */
  get opened(): boolean {
    return existsSync(join(this.dir, 'shells'));
  }

  async open(runtime: Runtime, spec: RunSpec, request: ChannelRequest): Promise<Channel> {
    if (!runtime.channel) throw new Error('this runtime opens no channels');
    writeFileSync(join(this.dir, 'shells'), '', { mode: 0o600 });
    const opening = runtime.channel(spec, request);
    const tracked = opening.then(
      (channel) => channel,
      () => null,
    );
    this.#opening.add(tracked);
    try {
      const channel = await opening;
      void channel.exit.then(() => this.#opening.delete(tracked));
      return channel;
    } catch (err) {
      this.#opening.delete(tracked);
      throw err;
    }
  }

  /** Closes every shell, those still opening too, and waits for their end. */
  async close(): Promise<void> {
    const shells = await Promise.all([...this.#opening]);
    for (const shell of shells) shell?.close();
    await Promise.all(shells.map((s) => s?.exit));
  }
}
