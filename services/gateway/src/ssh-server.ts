/**
 * The gateway's SSH server: plain `ssh`, `scp`, `sftp` and `ssh -L` into a session. The SSH
 * username names the session; a one-time password or a key its owner registered logs in; each
 * channel then goes to the session through `deps.open`. It knows nothing of NATS nor of how
 * sessions are found: `GatewayDeps` does.
 */
import { type AddressInfo, createServer, type Server as NetServer, type Socket } from 'node:net';
import ssh2, { type AuthContext, type AuthenticationType, type Connection } from 'ssh2';
import { ChannelRefused } from '@trainyard/tunnel';
import { type ChannelContext, type LiveChannel, serveForward, serveSession } from './channels.ts';
import { LoginRateLimit, sourceOf } from './rate-limit.ts';
import type { GatewayDeps, LoginAttempt, LoginDecision, SessionRoute } from './types.ts';

export type { GatewayDeps, LoginAttempt, LoginDecision, SessionRoute } from './types.ts';
export type { LoginLimits } from './rate-limit.ts';

/** The only ways in; every refusal lists them, so the client knows what else to try. */
const METHODS: AuthenticationType[] = ['password', 'publickey'];
const DEFAULT_AUTH_TIMEOUT_MS = 30_000;
/** Login attempts one connection may make, key queries included, before it is cut off. */
const MAX_AUTH_TRIES = 20;
/** Connections from one source that may be logging in at once (like sshd's MaxStartups). */
const MAX_STARTUPS_PER_SOURCE = 10;
/** The longest name a session or a job has: a longer one is refused unasked. */
const MAX_NAME_LENGTH = 128;
/** Channels one connection may have open (or opening) at once. */
const MAX_CHANNELS = 10;
/** How long a stopped session's client gets to close its channels before it is disconnected. */
const LAST_WORDS_MS = 250;
/** How long an ended connection gets to say goodbye before its socket is cut. */
const GOODBYE_MS = 2_000;

const noop = () => {};

/** One TCP connection, known before SSH says who it is. */
interface Peer {
  socket: Socket;
  source: string;
  /** Until it has logged in, or closed. */
  loggingIn: boolean;
}

/** Answers a login, unless its client has gone meanwhile (ssh2 throws at an answer then). */
function answer(ctx: AuthContext, accept: boolean): void {
  try {
    if (accept) ctx.accept();
    else ctx.reject(METHODS);
  } catch {
    // The client hung up while its login was being decided: no one is left to answer.
  }
}

/** A connection logged into a session, with the channels it has open. */
interface Login {
  route: SessionRoute;
  /** Who logged in. */
  user: string;
  client: Connection;
  socket: Socket | undefined;
  channels: Map<LiveChannel, () => void>;
  /** Set by `closeSession`: why new channels are refused, and how to end once none are left. */
  closing?: { message: string; end(): void };
}

/**
 * An SSH server for sessions. Logins are rate limited per source address and per session name;
 * a connection that has not logged in within the auth timeout is dropped.
 */
export class SshGateway {
  private readonly ssh: ssh2.Server;
  private readonly tcp: NetServer;
  private readonly limiter: LoginRateLimit;
  private readonly authTimeoutMs: number;
  private readonly peers = new Map<string, Peer>();
  private readonly clients = new Set<Connection>();
  private readonly logins = new Map<string, Set<Login>>();
  private readonly active = new Map<string, number>();
  /** Connections logging in, by source. */
  private readonly startups = new Map<string, number>();
  /** Users whose connections `closeUser` ended: they log in no more. */
  private readonly closedUsers = new Set<string>();

  constructor(private readonly deps: GatewayDeps) {
    this.limiter = new LoginRateLimit(deps.limits);
    this.authTimeoutMs = deps.limits?.authTimeoutMs ?? DEFAULT_AUTH_TIMEOUT_MS;
    // No compression: what sessions carry is mostly compressed or encrypted already, and ssh2's
    // zlib state is gone once a client hangs up, which an answer to its login then meets.
    const algorithms = { compress: ['none' as const] };
    this.ssh = new ssh2.Server(
      { hostKeys: [deps.hostKey], ident: 'trainyard', algorithms },
      (client, info) => this.connected(client, info.ip, info.port),
    );
    // Sockets come through a server of our own so that each can be timed out and cut.
    this.tcp = createServer((socket) => this.admit(socket));
  }

  /** Listens on `port` (0 picks a free one); resolves to the port bound. */
  listen(port: number, host?: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.tcp.once('error', reject);
      this.tcp.listen(port, host, () => {
        this.tcp.off('error', reject);
        resolve((this.tcp.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Ends every connection logged into the session (it was stopped, or ran out of time): writes
   * `message` to the stderr of each open channel and closes it, so the client reads the message
   * before its channel closes, then disconnects. Returns how many connections it ends.
   */
  closeSession(sessionId: string, message: string): number {
    return this.endLogins([...(this.logins.get(sessionId) ?? [])], message);
  }

  /** Ends every connection `user` logged in with (the account was disabled), as `closeSession`. */
  closeUser(user: string, message: string): number {
    this.closedUsers.add(user);
    const logins = [...this.logins.values()].flatMap((set) => [...set]);
    return this.endLogins(
      logins.filter((login) => login.user === user),
      message,
    );
  }

  private endLogins(logins: Login[], message: string): number {
    for (const login of logins) {
      if (login.closing) continue;
      let ended = false;
      // The client prints a channel's last stderr only once it has closed the channel itself:
      // a disconnect right behind the close would cut the message off.
      const end = () => {
        if (ended) return;
        ended = true;
        setTimeout(() => {
          login.client.end();
          if (login.socket) this.cutLater(login.socket);
        }, LAST_WORDS_MS).unref();
      };
      login.closing = { message, end };
      for (const live of login.channels.keys()) {
        live.notify(message);
        live.close();
      }
      if (login.channels.size === 0) end();
      else setTimeout(end, GOODBYE_MS).unref();
    }
    return logins.length;
  }

  /** Stops listening and ends every connection. */
  async close(): Promise<void> {
    this.limiter.stop();
    const stopped = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    for (const client of this.clients) client.end();
    for (const { socket } of this.peers.values()) {
      socket.end();
      this.cutLater(socket);
    }
    await stopped;
  }

  private admit(socket: Socket): void {
    const key = `${socket.remoteAddress}:${socket.remotePort}`;
    const source = sourceOf(socket.remoteAddress ?? '');
    const startups = this.startups.get(source) ?? 0;
    if (startups >= MAX_STARTUPS_PER_SOURCE) {
      socket.destroy();
      return this.deps.onCrowded?.(source);
    }
    this.startups.set(source, startups + 1);
    const peer: Peer = { socket, source, loggingIn: true };
    this.peers.set(key, peer);
    const timer = setTimeout(() => {
      if (peer.loggingIn) socket.destroy();
    }, this.authTimeoutMs);
    socket.once('close', () => {
      clearTimeout(timer);
      this.peers.delete(key);
      this.settle(peer);
    });
    this.ssh.injectSocket(socket);
  }

  /** A connection is no longer logging in: it has logged in, or it has closed. */
  private settle(peer: Peer): void {
    if (!peer.loggingIn) return;
    peer.loggingIn = false;
    const left = (this.startups.get(peer.source) ?? 1) - 1;
    if (left > 0) this.startups.set(peer.source, left);
    else this.startups.delete(peer.source);
  }

  private connected(client: Connection, ip: string, port: number): void {
    const peer = this.peers.get(`${ip}:${port}`);
    const source = ip.startsWith('::ffff:') && ip.includes('.') ? ip.slice(7) : ip;
    let loggedIn: { route: SessionRoute; user: string } | undefined;
    this.clients.add(client);
    client.on('error', noop);
    client.once('close', () => this.clients.delete(client));
    let tries = 0;
    client.on('authentication', (ctx) => {
      // Like sshd's MaxAuthTries: a client that keeps offering what is refused is cut off.
      if (++tries > MAX_AUTH_TRIES) return void client.end();
      this.authenticate(ctx, source, (route, user) => (loggedIn = { route, user })).catch(() =>
        client.end(),
      );
    });
    client.once('ready', () => {
      if (peer) this.settle(peer);
      if (loggedIn) this.loggedIn(client, loggedIn.route, loggedIn.user, peer?.socket);
      else client.end();
    });
  }

  private async authenticate(
    ctx: AuthContext,
    source: string,
    accepted: (route: SessionRoute, user: string) => void,
  ): Promise<void> {
    if (ctx.method !== 'password' && ctx.method !== 'publickey') return answer(ctx, false);
    const method = ctx.method;
    const named = ctx.username.length <= MAX_NAME_LENGTH;
    const session = named ? ctx.username : `${ctx.username.slice(0, MAX_NAME_LENGTH)}…`;
    // A public-key query asks only whether the key would do; it proves nothing (anyone may offer
    // anyone's public key), so it is neither recorded nor counted as a failure once answered.
    const query = method === 'publickey' && !ctx.signature;
    const attempt = { session, method, source };
    // Refused unheard, and not recorded: a flood of them must not flood the log.
    const counted = sourceOf(source);
    if (this.limiter.limited(counted, session, method)) return answer(ctx, false);
    // A name longer than any is counted against its source alone: kept by name, it would hold
    // memory for the window.
    const forgive = this.limiter.begin(counted, session, named ? method : 'publickey');

    let decision: LoginDecision;
    try {
      if (!named) decision = { ok: false, user: null, reason: 'noSuchSession' };
      else if (ctx.method === 'publickey') {
        const key = { algo: ctx.key.algo, data: ctx.key.data };
        decision = await this.deps.keyLogin(session, key, source);
      } else if (typeof ctx.password !== 'string') {
        decision = { ok: false, user: null, reason: 'badPassword' };
      } else decision = await this.deps.passwordLogin(session, ctx.password, source);
    } catch {
      decision = { ok: false, user: null, reason: 'unavailable' };
    }
    if (decision.ok && ctx.method === 'publickey' && ctx.signature && !signedBy(ctx)) {
      decision = { ok: false, user: decision.user, reason: 'badSignature' };
    }
    if (query || decision.ok || decision.reason === 'unavailable') forgive();
    if (query) return answer(ctx, decision.ok);

    if (!decision.ok) {
      this.report({ ...attempt, user: decision.user, accepted: false, reason: decision.reason });
      return answer(ctx, false);
    }
    // The user may have been disabled while the login was decided.
    if (this.closedUsers.has(decision.user)) {
      this.report({ ...attempt, user: decision.user, accepted: false, reason: 'accountDisabled' });
      return answer(ctx, false);
    }
    this.report({ ...attempt, user: decision.user, accepted: true });
    accepted(decision.route, decision.user);
    answer(ctx, true);
  }

  private loggedIn(
    client: Connection,
    route: SessionRoute,
    user: string,
    socket: Socket | undefined,
  ): void {
    const login: Login = { route, user, client, socket, channels: new Map() };
    let markGone = noop;
    const gone = new Promise<void>((resolve) => (markGone = resolve));
    let closed = false;
    let opening = 0;
    const ctx: ChannelContext = {
      open: async (request) => {
        if (login.closing) throw new ChannelRefused('sessionClosed', login.closing.message);
        // Like sshd's MaxSessions: each channel holds buffers here and a process on the worker.
        if (login.channels.size + opening >= MAX_CHANNELS) {
          throw new ChannelRefused('tooManyChannels', `at most ${MAX_CHANNELS} channels at once`);
        }
        opening += 1;
        try {
          return await this.deps.open(route, request);
        } finally {
          opening -= 1;
        }
      },
      get closed() {
        return closed;
      },
      gone,
      track: (live) => this.track(login, live),
    };
    addTo(this.logins, route.sessionId, login);

    client.on('session', (accept) => serveSession(accept(), ctx));
    client.on('tcpip', (accept, reject, info) => void serveForward(accept, reject, info, ctx));
    // Remote forwarding (`ssh -R`) and unix sockets are refused; x11 and agent forwarding are
    // refused by having no listener.
    client.on('request', (_accept, reject) => reject?.());
    client.once('close', () => {
      closed = true;
      markGone();
      removeFrom(this.logins, route.sessionId, login);
      for (const [live, release] of [...login.channels]) {
        live.close();
        release();
      }
    });
  }

  /** Counts a channel open in its session until released; tells `onActivity` of 0 <-> 1. */
  private track(login: Login, live: LiveChannel): () => void {
    const { route } = login;
    const count = (this.active.get(route.sessionId) ?? 0) + 1;
    this.active.set(route.sessionId, count);
    if (count === 1) this.activity(route, true);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      login.channels.delete(live);
      if (login.channels.size === 0) login.closing?.end();
      const left = (this.active.get(route.sessionId) ?? 1) - 1;
      if (left > 0) return void this.active.set(route.sessionId, left);
      this.active.delete(route.sessionId);
      this.activity(route, false);
    };
    login.channels.set(live, release);
    return release;
  }

  private activity(route: SessionRoute, active: boolean): void {
    try {
      this.deps.onActivity?.(route, active);
    } catch {
      // A listener's failure is its own; the channel carries on.
    }
  }

  private report(attempt: LoginAttempt): void {
    try {
      this.deps.onLogin(attempt);
    } catch {
      // Recording the attempt failed; the decision stands.
    }
  }

  private cutLater(socket: Socket): void {
    setTimeout(() => socket.destroy(), GOODBYE_MS).unref();
  }
}

/** Whether the client signed the login with the private half of the key it offered. */
function signedBy(ctx: AuthContext & { method: 'publickey' }): boolean {
  if (!ctx.signature || !ctx.blob) return false;
  const key = ssh2.utils.parseKey(ctx.key.data);
  if (key instanceof Error) return false;
  return key.verify(ctx.blob, ctx.signature, ctx.hashAlgo) === true;
}

function addTo<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  const set = map.get(key) ?? new Set<V>();
  set.add(value);
  map.set(key, set);
}

function removeFrom<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  const set = map.get(key);
  set?.delete(value);
  if (set?.size === 0) map.delete(key);
}
