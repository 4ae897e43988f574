import { describe, expect, it } from 'vitest';
import { refusedBase } from '../src/index.ts';

describe('base images', () => {
  it('are any image a registry holds, but none of Trainyard’s own', () => {
    for (const ok of ['python', 'python:3.11', 'pytorch/pytorch:2.3.0', 'ghcr.io/org/img:v1'])
      expect(refusedBase(ok, '127.0.0.1:5000'), ok).toBeNull();
    for (const refused of [
      '127.0.0.1:5000/trainyard/jobs:job_1',
      '127.0.0.1:5000/anything@sha256:' + 'a'.repeat(64),
      'trainyard/python:3',
      'trainyard/cache:abc',
      'library/trainyard/jobs',
      'docker.io/trainyard/cache:x',
    ])
      expect(refusedBase(refused, '127.0.0.1:5000'), refused).not.toBeNull();
    expect(refusedBase('Registry.Local:5000/trainyard/jobs:job_1', 'registry.local:5000')).toMatch(
      /Trainyard's own registry/,
    );
  });
});
