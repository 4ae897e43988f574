import { describe, expect, it } from 'vitest';
import { CONTROL_SERVICES, type ControlService } from '@trainyard/service-kit';
import {
  servicePermissions,
  WORKER_IMPORTS,
  workerPermissions,
  type NatsPermissions,
} from '../src/index.ts';

/** Whether a NATS subject pattern (with `*` and `>`) takes in every subject `subject` does. */
function covers(pattern: string, subject: string): boolean {
  const p = pattern.split('.');
  const s = subject.split('.');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '>') return i < s.length;
    if (i >= s.length) return false;
    if (p[i] === '*' && s[i] !== '>') continue;
    if (p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}

const published = (permissions: NatsPermissions) => permissions.publish?.allow ?? [];

describe('the workers’ account', () => {
  it('compares subject patterns as nats-server does', () => {
    expect(covers('ty.hb.*', 'ty.hb.w1')).toBe(true);
    expect(covers('ty.hb.*', 'ty.hb.*')).toBe(true);
    expect(covers('ty.hb.*', 'ty.hb.>')).toBe(false);
    expect(covers('ty.log.>', 'ty.log.*.*.w1')).toBe(true);
    expect(covers('$JS.API.DIRECT.GET.*', '$JS.API.DIRECT.GET.OBJ_a.>')).toBe(false);
    expect(covers('ty.report.*', 'ty.report')).toBe(false);
  });

  it('imports every subject a worker’s login may publish, so that none is silently lost', () => {
    for (const subject of published(workerPermissions('w1'))) {
      const by = WORKER_IMPORTS.filter((i) => covers(i.subject, subject));
      expect(by, subject).not.toHaveLength(0);
    }
  });

  it('imports nothing that reaches events, dispatches or the buckets that hold secrets', () => {
    const forbidden = [
      'ty.ev.job.job_1',
      'ty.ev.worker.w1',
      'ty.dispatch.w1.gpu0',
      '$KV.ty_credentials.admin',
      '$KV.ty_config.token_key',
      '$JS.API.STREAM.DELETE.TY_EVENTS',
      '$JS.API.CONSUMER.CREATE.TY_DISPATCH',
      '$JS.API.CONSUMER.DURABLE.CREATE.TY_DISPATCH.worker_w2_gpu0',
    ];
    for (const subject of forbidden) {
      expect(
        WORKER_IMPORTS.filter((i) => covers(i.subject, subject)),
        subject,
      ).toHaveLength(0);
    }
  });
});

describe('the control plane’s logins', () => {
  /** Whether a service's login may publish `subject`: some allow takes it in, no deny does. */
  const mayPublish = (service: ControlService, subject: string) => {
    const { publish } = servicePermissions(service);
    return (
      (publish?.allow ?? []).some((p) => covers(p, subject)) &&
      !(publish?.deny ?? []).some((p) => covers(p, subject))
    );
  };

  it('lets the gateway alone read its private host key, and the API its public half', () => {
    const secret = [
      '$JS.API.DIRECT.GET.KV_ty_gateway.$KV.ty_gateway.hostKey',
      '$JS.API.STREAM.MSG.GET.KV_ty_gateway',
      '$JS.API.CONSUMER.CREATE.KV_ty_gateway',
      '$JS.API.CONSUMER.CREATE.KV_ty_gateway.c1.$KV.ty_gateway.>',
      '$KV.ty_gateway.hostKey',
    ];
    for (const service of CONTROL_SERVICES) {
      for (const subject of secret) {
        expect(mayPublish(service, subject), `${service}: ${subject}`).toBe(service === 'gateway');
      }
    }
    const shown = '$JS.API.DIRECT.GET.KV_ty_gateway_public.$KV.ty_gateway_public.hostKey';
    expect(mayPublish('api', shown)).toBe(true);
    expect(mayPublish('api', '$KV.ty_gateway_public.hostKey')).toBe(false);
    // Whoever makes a bucket sets what flows into it (sources, a mirror): the gateway makes it.
    expect(mayPublish('api', '$JS.API.STREAM.CREATE.KV_ty_gateway_public')).toBe(false);
    expect(mayPublish('gateway', '$KV.ty_gateway_public.hostKey')).toBe(true);
    // The API still reads what it keeps, and any worker's bucket.
    expect(mayPublish('api', '$JS.API.DIRECT.GET.KV_ty_credentials.$KV.ty_credentials.admin')).toBe(
      true,
    );
    expect(mayPublish('api', '$JS.API.DIRECT.GET.OBJ_ty_w1.$O.ty_w1.M.x')).toBe(true);
  });
});
