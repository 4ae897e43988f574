import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenIssuer } from '@trainyard/api';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';

/**
 * Hostile input, case by case: every one is answered with a clear error (a status and a code)
 * and changes nothing in the event log.
 */

const SECRET = 'hostile-inputs-secret-0123456789abcdef';
let t: TestStack;
let admin: string;
let user: string;
let adminsJob: string;

const spec = (over: Record<string, unknown> = {}) => ({
  name: 'hostile',
  command: 'true',
  resources: { gpus: 0 },
  ...over,
});

/** Writes an archive with Python, which lets us build entries no packer would. */
function archive(
  kind: 'tar.gz' | 'zip',
  entries: { name: string; data?: string; link?: string; hard?: string; type?: string }[],
): Buffer {
  const script =
    kind === 'tar.gz'
      ? `
import io, json, sys, tarfile
b = io.BytesIO()
with tarfile.open(fileobj=b, mode='w:gz') as t:
    for e in json.loads(sys.argv[1]):
        i = tarfile.TarInfo(e['name'])
        if 'link' in e: i.type, i.linkname = tarfile.SYMTYPE, e['link']; t.addfile(i)
        elif 'hard' in e: i.type, i.linkname = tarfile.LNKTYPE, e['hard']; t.addfile(i)
        elif e.get('type') == 'chr': i.type, i.devmajor, i.devminor = tarfile.CHRTYPE, 1, 3; t.addfile(i)
        elif e.get('type') == 'fifo': i.type = tarfile.FIFOTYPE; t.addfile(i)
        elif e.get('type') == 'dir': i.type = tarfile.DIRTYPE; t.addfile(i)
        else:
            d = e.get('data', '').encode(); i.size = len(d); t.addfile(i, io.BytesIO(d))
sys.stdout.buffer.write(b.getvalue())
`
      : `
import io, json, sys, zipfile
b = io.BytesIO()
with zipfile.ZipFile(b, 'w', zipfile.ZIP_DEFLATED) as z:
    for e in json.loads(sys.argv[1]):
        i = zipfile.ZipInfo(e['name']); i.compress_type = zipfile.ZIP_DEFLATED
        if 'link' in e: i.external_attr = 0o120777 << 16; z.writestr(i, e['link'])
        elif e.get('type') == 'fifo': i.external_attr = 0o010644 << 16; z.writestr(i, '')
        else: i.external_attr = 0o100644 << 16; z.writestr(i, e.get('data', ''))
sys.stdout.buffer.write(b.getvalue())
`;
  return execFileSync('python3', ['-c', script, JSON.stringify(entries)], {
    maxBuffer: 64 * 1024 ** 2,
  });
}

/** A zip whose directory says it holds `n` empty files. */
function manyEntries(n: number): Buffer {
  return execFileSync(
    'python3',
    [
      '-c',
      `import io,sys,zipfile
b=io.BytesIO()
with zipfile.ZipFile(b,'w') as z:
    for i in range(${n}): z.writestr(f'f{i}', '')
sys.stdout.buffer.write(b.getvalue())`,
    ],
    { maxBuffer: 64 * 1024 ** 2 },
  );
}

/** A zip of 100 MiB of zeros, a few hundred KiB packed. */
function bomb(): Buffer {
  return execFileSync(
    'python3',
    [
      '-c',
      `import io,sys,zipfile
b=io.BytesIO()
with zipfile.ZipFile(b,'w',zipfile.ZIP_DEFLATED,compresslevel=9) as z:
    with z.open('zeros.bin','w') as f:
        block=bytes(1<<20)
        for _ in range(100): f.write(block)
sys.stdout.buffer.write(b.getvalue())`,
    ],
    { maxBuffer: 64 * 1024 ** 2 },
  );
}

const json = (body: unknown, token: string | null = admin) =>
  t.http('/v1/jobs', {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const withCode = (code: Buffer, body: unknown = spec()) => submit(t, admin, body as object, code);

const get = (path: string, token: string | null = admin, headers: Record<string, string> = {}) =>
  t.http(path, { token, headers });

const post = (path: string, body: unknown, token: string | null = admin) =>
  t.http(path, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const multipart = (parts: [string, string | Blob, string?][], token: string = admin) => {
  const form = new FormData();
  for (const [name, value, file] of parts) {
    if (typeof value === 'string') form.append(name, value);
    else form.append(name, value, file ?? 'code.tar.gz');
  }
  return t.http('/v1/jobs', { method: 'POST', body: form, token });
};

type Case = [string, () => Promise<Response>, number, string];

const cases = (): Case[] => {
  const env = (n: number, size = 1) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`V${i}`, 'x'.repeat(size)]));
  return [
    // The spec, field by field.
    ['no name', () => json({ command: 'true', resources: { gpus: 0 } }), 400, 'VALIDATION_FAILED'],
    ['an empty name', () => json(spec({ name: '' })), 400, 'VALIDATION_FAILED'],
    ['a blank name', () => json(spec({ name: '   ' })), 400, 'VALIDATION_FAILED'],
    [
      'a name of 129 characters',
      () => json(spec({ name: 'n'.repeat(129) })),
      400,
      'VALIDATION_FAILED',
    ],
    ['a name with a NUL', () => json(spec({ name: 'a\u0000b' })), 400, 'VALIDATION_FAILED'],
    [
      'a name with an escape sequence',
      () => json(spec({ name: 'a\u001b[2Jb' })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a name with a bidi override',
      () => json(spec({ name: 'a\u202eb' })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a name with a bidi isolate',
      () => json(spec({ name: 'a\u2066b' })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a name with a zero-width space',
      () => json(spec({ name: 'a\u200bb' })),
      400,
      'VALIDATION_FAILED',
    ],
    ['a name with a newline', () => json(spec({ name: 'a\nb' })), 400, 'VALIDATION_FAILED'],
    [
      'a name with a line separator',
      () => json(spec({ name: 'a\u2028b' })),
      400,
      'VALIDATION_FAILED',
    ],
    ['a name that is a number', () => json(spec({ name: 42 })), 400, 'VALIDATION_FAILED'],
    ['no command', () => json({ name: 'x', resources: { gpus: 0 } }), 400, 'VALIDATION_FAILED'],
    ['a blank command', () => json(spec({ command: ' \t ' })), 400, 'VALIDATION_FAILED'],
    [
      'a command of 8,193 characters',
      () => json(spec({ command: 'x'.repeat(8193) })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a setup of 8,193 characters',
      () => json(spec({ setup: 'x'.repeat(8193) })),
      400,
      'VALIDATION_FAILED',
    ],
    ['an empty setup', () => json(spec({ setup: '' })), 400, 'VALIDATION_FAILED'],
    ['no resources', () => json({ name: 'x', command: 'true' }), 400, 'VALIDATION_FAILED'],
    ['resources as a string', () => json(spec({ resources: 'all' })), 400, 'VALIDATION_FAILED'],
    ['-1 GPUs', () => json(spec({ resources: { gpus: -1 } })), 400, 'VALIDATION_FAILED'],
    ['1.5 GPUs', () => json(spec({ resources: { gpus: 1.5 } })), 400, 'VALIDATION_FAILED'],
    ['65 GPUs', () => json(spec({ resources: { gpus: 65 } })), 400, 'VALIDATION_FAILED'],
    ['GPUs as a string', () => json(spec({ resources: { gpus: '2' } })), 400, 'VALIDATION_FAILED'],
    ['GPUs as null', () => json(spec({ resources: { gpus: null } })), 400, 'VALIDATION_FAILED'],
    [
      '0 GiB of VRAM',
      () => json(spec({ resources: { gpus: 1, vramGb: 0 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      '5,000 GiB of VRAM',
      () => json(spec({ resources: { gpus: 1, vramGb: 5000 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      '0 CPU slots',
      () => json(spec({ resources: { gpus: 0, cpus: 0 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      '1,025 CPU slots',
      () => json(spec({ resources: { gpus: 0, cpus: 1025 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a memory limit no job starts in',
      () => json(spec({ resources: { gpus: 0, memoryGb: 0.001 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an unknown resource',
      () => json(spec({ resources: { gpus: 0, tpus: 8 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an image where jobs run on the host',
      () => json(spec({ image: 'python:3.11' })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an image reference with a shell in it',
      () => json(spec({ image: '$(id)' })),
      400,
      'VALIDATION_FAILED',
    ],
    ['an unknown field', () => json(spec({ gpu: 1 })), 400, 'VALIDATION_FAILED'],
    [
      'a field named __proto__',
      () => json('{"name":"x","command":"true","resources":{"gpus":0},"__proto__":{"admin":true}}'),
      400,
      'VALIDATION_FAILED',
    ],
    ['priority 1,001', () => json(spec({ priority: 1001 })), 400, 'VALIDATION_FAILED'],
    ['priority -1,001', () => json(spec({ priority: -1001 })), 400, 'VALIDATION_FAILED'],
    ['priority 1.5', () => json(spec({ priority: 1.5 })), 400, 'VALIDATION_FAILED'],
    ['priority 1 from a user', () => json(spec({ priority: 1 }), user), 403, 'FORBIDDEN'],
    ['priority 1,000 from a user', () => json(spec({ priority: 1000 }), user), 403, 'FORBIDDEN'],
    ['-1 retries', () => json(spec({ maxRetries: -1 })), 400, 'VALIDATION_FAILED'],
    ['21 retries', () => json(spec({ maxRetries: 21 })), 400, 'VALIDATION_FAILED'],
    [
      'an env name starting with a digit',
      () => json(spec({ env: { '1A': 'x' } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an env name with a dash',
      () => json(spec({ env: { 'A-B': 'x' } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an env name with a space',
      () => json(spec({ env: { 'A B': 'x' } })),
      400,
      'VALIDATION_FAILED',
    ],
    ['an env name with a $', () => json(spec({ env: { $X: 'x' } })), 400, 'VALIDATION_FAILED'],
    ['an empty env name', () => json(spec({ env: { '': 'x' } })), 400, 'VALIDATION_FAILED'],
    [
      'an env value that is a number',
      () => json(spec({ env: { A: 1 } })),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'an env value of 64 KiB + 1',
      () => json(spec({ env: { A: 'x'.repeat(65537) } })),
      400,
      'VALIDATION_FAILED',
    ],
    ['257 env variables', () => json(spec({ env: env(257) })), 400, 'VALIDATION_FAILED'],
    [
      '58 env values of 16 KiB',
      () => json(spec({ env: env(58, 16 * 1024) })),
      400,
      'VALIDATION_FAILED',
    ],
    ['env as an array', () => json(spec({ env: ['A=1'] })), 400, 'VALIDATION_FAILED'],
    // The body itself.
    ['a spec that is an array', () => json([spec()]), 400, 'VALIDATION_FAILED'],
    ['a spec that is a string', () => json('"run it"'), 400, 'VALIDATION_FAILED'],
    ['a spec that is null', () => json('null'), 400, 'VALIDATION_FAILED'],
    ['a body that is not JSON', () => json('{"name":'), 400, 'VALIDATION_FAILED'],
    [
      'a JSON body over 1 MiB',
      () => json({ ...spec(), padding: 'x'.repeat(1_100_000) }),
      413,
      'PAYLOAD_TOO_LARGE',
    ],
    [
      'a body in text/plain',
      () =>
        t.http('/v1/jobs', {
          method: 'POST',
          token: admin,
          headers: { 'content-type': 'text/plain' },
          body: 'run',
        }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a body in application/xml',
      () =>
        t.http('/v1/jobs', {
          method: 'POST',
          token: admin,
          headers: { 'content-type': 'application/xml' },
          body: '<job/>',
        }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    ],
    [
      'an archive whose root is a link',
      () => withCode(archive('tar.gz', [{ name: '.', link: '/etc' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'an entry name of 300 bytes',
      () => withCode(archive('tar.gz', [{ name: 'n'.repeat(300), data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'an entry 100 directories deep',
      () => withCode(archive('tar.gz', [{ name: `${'d/'.repeat(100)}x`, data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a multipart spec that is not JSON',
      () => multipart([['spec', '{oops']]),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a multipart form with no spec',
      () => multipart([['code', new Blob([archive('tar.gz', [{ name: 'a', data: 'b' }])])]]),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a multipart form with an extra field',
      () =>
        multipart([
          ['spec', JSON.stringify(spec())],
          ['extra', 'x'],
        ]),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a multipart form with two code files',
      () =>
        multipart([
          ['spec', JSON.stringify(spec())],
          ['code', new Blob([archive('tar.gz', [{ name: 'a', data: 'b' }])])],
          ['code', new Blob([archive('tar.gz', [{ name: 'a', data: 'b' }])])],
        ]),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'code that is not an archive',
      () => withCode(Buffer.from('#!/bin/sh\necho hi\n')),
      400,
      'BAD_ARCHIVE',
    ],
    ['empty code', () => withCode(Buffer.alloc(0)), 400, 'BAD_ARCHIVE'],
    [
      'a truncated tar.gz',
      () => withCode(archive('tar.gz', [{ name: 'a', data: 'x'.repeat(5000) }]).subarray(0, 40)),
      400,
      'BAD_ARCHIVE',
    ],
    // Archives.
    [
      'an entry climbing out with ..',
      () => withCode(archive('tar.gz', [{ name: '../x', data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'an entry deep in .. ',
      () => withCode(archive('tar.gz', [{ name: 'a/../../x', data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'an absolute entry',
      () => withCode(archive('tar.gz', [{ name: '/etc/cron.d/x', data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a zip entry climbing out',
      () => withCode(archive('zip', [{ name: '../x', data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a zip entry with a backslash climb',
      () => withCode(archive('zip', [{ name: '..\\x', data: 'x' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a link to /etc',
      () => withCode(archive('tar.gz', [{ name: 'etc', link: '/etc' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a link out with ..',
      () => withCode(archive('tar.gz', [{ name: 'up', link: '../..' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a zip link out',
      () => withCode(archive('zip', [{ name: 'up', link: '../../etc' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a chain of links out',
      () =>
        withCode(
          archive('zip', [
            { name: 'd', link: '.' },
            { name: 'e', link: 'd/..' },
            { name: 'e/f', link: '..' },
            { name: 'e/f/x', data: 'x' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a file under a link',
      () =>
        withCode(
          archive('tar.gz', [
            { name: 'sub/a', data: 'x' },
            { name: 'l', link: 'sub' },
            { name: 'l/b', data: 'x' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a hard link',
      () =>
        withCode(
          archive('tar.gz', [
            { name: 'a', data: 'x' },
            { name: 'b', hard: 'a' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a character device',
      () => withCode(archive('tar.gz', [{ name: 'null', type: 'chr' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a fifo',
      () => withCode(archive('tar.gz', [{ name: 'pipe', type: 'fifo' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a zip fifo',
      () => withCode(archive('zip', [{ name: 'pipe', type: 'fifo' }])),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a file and a link at one path',
      () =>
        withCode(
          archive('zip', [
            { name: 'x', data: 'a' },
            { name: 'x', link: '../x' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a file twice',
      () =>
        withCode(
          archive('tar.gz', [
            { name: 'x', data: 'a' },
            { name: 'x', data: 'b' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    [
      'a file under a file',
      () =>
        withCode(
          archive('tar.gz', [
            { name: 'x', data: 'a' },
            { name: 'x/y', data: 'b' },
          ]),
        ),
      400,
      'BAD_ARCHIVE',
    ],
    ['a zip of 50,001 entries', () => withCode(manyEntries(50_001)), 400, 'BAD_ARCHIVE'],
    ['a zip bomb', () => withCode(bomb()), 400, 'BAD_ARCHIVE'],
    // Tokens and headers.
    ['no token', () => get('/v1/jobs', null), 401, 'UNAUTHENTICATED'],
    [
      'an empty bearer',
      () => get('/v1/jobs', null, { authorization: 'Bearer ' }),
      401,
      'UNAUTHENTICATED',
    ],
    [
      'basic auth',
      () => get('/v1/jobs', null, { authorization: 'Basic YWRtaW46YWRtaW4=' }),
      401,
      'UNAUTHENTICATED',
    ],
    ['a garbage token', () => get('/v1/jobs', 'garbage'), 401, 'UNAUTHENTICATED'],
    [
      'an unsigned token (alg none)',
      () =>
        get(
          '/v1/jobs',
          `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"sub":"admin","role":"admin","iss":"trainyard","exp":9999999999}').toString('base64url')}.`,
        ),
      401,
      'UNAUTHENTICATED',
    ],
    [
      'a token signed with another key',
      async () =>
        get(
          '/v1/jobs',
          await new TokenIssuer('another-key-0123456789abcdef0123').issue({
            username: 'admin',
            role: 'admin',
          }),
        ),
      401,
      'UNAUTHENTICATED',
    ],
    [
      'an expired token',
      async () =>
        get(
          '/v1/jobs',
          await new TokenIssuer(SECRET, -60).issue({ username: 'admin', role: 'admin' }),
        ),
      401,
      'TOKEN_EXPIRED',
    ],
    [
      'a refresh token that is garbage',
      () => post('/v1/auth/refresh', { refreshToken: 'garbage' }, null),
      401,
      'UNAUTHENTICATED',
    ],
    [
      'a refresh token for a made-up session',
      () =>
        post(
          '/v1/auth/refresh',
          { refreshToken: `admin.${'0'.repeat(32)}.${'A'.repeat(43)}` },
          null,
        ),
      401,
      'UNAUTHENTICATED',
    ],
    [
      'a login with no password',
      () => post('/v1/auth/login', { username: 'admin' }, null),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a login as a user that does not exist',
      () => post('/v1/auth/login', { username: 'nobody', password: 'whatever-it-is-1' }, null),
      401,
      'UNAUTHENTICATED',
    ],
    // Paths and queries.
    ['a job id that climbs out', () => get('/v1/jobs/..%2F..%2Fetc%2Fpasswd'), 404, 'NOT_FOUND'],
    ['a job id of 300 characters', () => get(`/v1/jobs/${'j'.repeat(300)}`), 404, 'NOT_FOUND'],
    ['a job id in unicode', () => get('/v1/jobs/%E2%80%AEjob'), 404, 'NOT_FOUND'],
    ['another user’s job', () => get(`/v1/jobs/${adminsJob}`, user), 404, 'NOT_FOUND'],
    ['another user’s job’s logs', () => get(`/v1/jobs/${adminsJob}/logs`, user), 404, 'NOT_FOUND'],
    [
      'cancelling another user’s job',
      () => post(`/v1/jobs/${adminsJob}/cancel`, {}, user),
      404,
      'NOT_FOUND',
    ],
    [
      'an output path that climbs out',
      () => get(`/v1/jobs/${adminsJob}/outputs/..%2F..%2Fetc%2Fpasswd`),
      404,
      'NOT_FOUND',
    ],
    ['a list limit of 0', () => get('/v1/jobs?limit=0'), 400, 'VALIDATION_FAILED'],
    ['a list limit of 501', () => get('/v1/jobs?limit=501'), 400, 'VALIDATION_FAILED'],
    [
      'a list limit that is not a number',
      () => get('/v1/jobs?limit=all'),
      400,
      'VALIDATION_FAILED',
    ],
    ['a status that does not exist', () => get('/v1/jobs?status=pwned'), 400, 'VALIDATION_FAILED'],
    [
      'a cursor that is not one',
      () => get('/v1/jobs?cursor=%27%3B%20drop%20table%20jobs'),
      400,
      'VALIDATION_FAILED',
    ],
    ['a negative sequence to wait for', () => get('/v1/jobs?after=-1'), 400, 'VALIDATION_FAILED'],
    [
      'a log position that is not one',
      () => get(`/v1/jobs/${adminsJob}/logs?from=1:x`),
      400,
      'VALIDATION_FAILED',
    ],
    // Users.
    [
      'a user made by a user',
      () =>
        post(
          '/v1/users',
          { username: 'mallory', password: 'a-fine-password-9', role: 'admin' },
          user,
        ),
      403,
      'FORBIDDEN',
    ],
    [
      'an uppercase username',
      () => post('/v1/users', { username: 'Mallory', password: 'a-fine-password-9' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a one-letter username',
      () => post('/v1/users', { username: 'm', password: 'a-fine-password-9' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a username of 33 letters',
      () => post('/v1/users', { username: 'm'.repeat(33), password: 'a-fine-password-9' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a username starting with a digit',
      () => post('/v1/users', { username: '1mallory', password: 'a-fine-password-9' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a username with a dot',
      () => post('/v1/users', { username: 'mal.lory', password: 'a-fine-password-9' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a role that does not exist',
      () => post('/v1/users', { username: 'mallory', password: 'a-fine-password-9', role: 'root' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a password of 11 characters',
      () => post('/v1/users', { username: 'mallory', password: 'abcdefgh-12' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a password with the username in it',
      () => post('/v1/users', { username: 'mallory', password: 'mallory-is-great' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a common password',
      () => post('/v1/users', { username: 'mallory', password: 'Password1234' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a password of one character repeated',
      () => post('/v1/users', { username: 'mallory', password: 'xxxxxxxxxxxxxxxx' }),
      400,
      'VALIDATION_FAILED',
    ],
    [
      'a user who exists',
      () => post('/v1/users', { username: 'alice', password: 'another-fine-one-7' }),
      409,
      'USER_EXISTS',
    ],
    ['disabling oneself', () => post('/v1/users/admin/disable', {}), 400, 'VALIDATION_FAILED'],
    [
      'disabling a user who does not exist',
      () => post('/v1/users/nobody/disable', {}),
      404,
      'NOT_FOUND',
    ],
  ];
};

beforeAll(async () => {
  t = await startTestStack({ jwtSecret: SECRET });
  admin = await t.token();
  const created = await post('/v1/users', {
    username: 'alice',
    password: 'wonderland-rabbit-7',
    role: 'user',
  });
  expect(created.status).toBe(201);
  user = await t.token('alice', 'wonderland-rabbit-7');
  const code = await codeArchive({ 'run.sh': 'echo ok > "$TRAINYARD_OUTPUT_DIR/ok.txt"\n' });
  const res = await submit(t, admin, spec({ command: 'sh run.sh' }), code);
  adminsJob = ((await res.json()) as { id: string }).id;
  await t.waitForJob(adminsJob, admin, (j) => j.status === 'succeeded');
});

afterAll(async () => t?.stop());

describe('hostile input', () => {
  it('holds at least 80 cases', () => {
    expect(cases().length).toBeGreaterThanOrEqual(80);
  });

  it.each(cases().map((c) => [c[0], c] as const))(
    'refuses %s with a clear error, changing nothing',
    async (_name, [, request, status, code]) => {
      const before = await t.stack.ctx.bus.store.lastSeq();
      const res = await request();
      const body = (await res.json().catch(() => null)) as {
        error?: { code: string; message: string };
      } | null;
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(body?.error?.code).toBe(code);
      expect(body?.error?.message.length).toBeGreaterThan(3);
      expect(await t.stack.ctx.bus.store.lastSeq()).toBe(before);
    },
  );
});

describe('a fuzzed job spec', () => {
  it('is accepted or refused with a 400, never a failure of ours, and a refusal stores nothing', async () => {
    const field = fc.oneof(
      fc.string(),
      fc.integer(),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
      fc.array(fc.string(), { maxLength: 3 }),
      fc.dictionary(fc.string(), fc.string(), { maxKeys: 3 }),
    );
    const arbitrarySpec = fc.record(
      {
        name: fc.oneof(fc.string({ maxLength: 140 }), field),
        command: fc.oneof(fc.string({ maxLength: 40 }), field),
        setup: field,
        resources: fc.oneof(
          fc.record(
            {
              gpus: fc.oneof(fc.integer({ min: -2, max: 70 }), field),
              vramGb: fc.oneof(fc.double({ min: -1, max: 5000 }), field),
              cpus: fc.oneof(fc.integer({ min: -1, max: 2000 }), field),
            },
            { requiredKeys: [] },
          ),
          field,
        ),
        priority: fc.oneof(fc.integer({ min: -1200, max: 0 }), field),
        maxRetries: fc.oneof(fc.integer({ min: -2, max: 30 }), field),
        env: fc.oneof(
          fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 20 })),
          field,
        ),
        extra: field,
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(arbitrarySpec, async (candidate) => {
        const before = await t.stack.ctx.bus.store.lastSeq();
        const res = await json(candidate, user);
        const body = (await res.json()) as { id?: string; error?: { code: string } };
        if (res.status === 202) {
          expect(body.id).toMatch(/^job_/);
          return;
        }
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(body.error?.code).toBe('VALIDATION_FAILED');
        expect(await t.stack.ctx.bus.store.lastSeq()).toBe(before);
      }),
      { numRuns: 150, seed: 20261201 },
    );
    const valid = await json(spec({ name: 'fuzz-control' }), user);
    expect(valid.status).toBe(202);
  });
});
