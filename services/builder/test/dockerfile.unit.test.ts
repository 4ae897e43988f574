import { describe, expect, it } from 'vitest';
import {
  buildArgs,
  cacheKey,
  classifyBuildError,
  dockerfileText,
  IMAGE_WHEELS_DIR,
  isUrl,
  REQUIREMENTS_RUN,
  SETUP_RUN,
  type CacheInputs,
} from '../src/dockerfile.ts';

describe('dockerfileText', () => {
  it('takes the base image from a build arg and the code as a directory', () => {
    const lines = dockerfileText().trim().split('\n');
    expect(lines.slice(0, 2)).toEqual(['ARG BASE', 'FROM ${BASE}']);
    expect(lines).toContain('COPY --chown=65534:65534 code/ /workspace/');
    expect(lines).toContain('WORKDIR /workspace');
    expect(lines).toContain(`RUN ${REQUIREMENTS_RUN}`);
    expect(dockerfileText()).toContain('chmod -R a+rwX /workspace');
    expect(dockerfileText()).toContain('trainyard.build=1');
  });

  it('is the same text every time: nothing a job writes reaches it', () => {
    expect(dockerfileText()).toBe(dockerfileText());
    expect(dockerfileText().length).toBeLessThan(1_000);
  });
});

describe('buildArgs', () => {
  it('tells pip there is no index when none is given and RUN steps have no network', () => {
    expect(buildArgs('trainyard/python:3', { network: 'none' })).toEqual({
      BASE: 'trainyard/python:3',
      PIP_NO_INDEX: '1',
    });
  });

  it('leaves pip its default index on the host network', () => {
    expect(buildArgs('b', { network: 'host' })).toEqual({ BASE: 'b' });
  });

  it('points pip at the copy of a local find-links directory in the image', () => {
    expect(buildArgs('b', { findLinks: '/srv/wheels', network: 'host' })).toEqual({
      BASE: 'b',
      PIP_FIND_LINKS: IMAGE_WHEELS_DIR,
      PIP_NO_INDEX: '1',
    });
  });

  it('passes an index and a find-links URL as they are', () => {
    const pip = {
      indexUrl: 'http://127.0.0.1:3141/simple',
      findLinks: 'https://wheels.example/',
      network: 'host',
    };
    expect(buildArgs('b', pip)).toEqual({
      BASE: 'b',
      PIP_INDEX_URL: 'http://127.0.0.1:3141/simple',
      PIP_FIND_LINKS: 'https://wheels.example/',
    });
  });
});

describe('isUrl', () => {
  it('tells a URL from a path', () => {
    expect(isUrl('https://x/')).toBe(true);
    expect(isUrl('file:///srv/wheels')).toBe(true);
    expect(isUrl('/srv/wheels')).toBe(false);
    expect(isUrl('wheels')).toBe(false);
  });
});

describe('cacheKey', () => {
  const inputs: CacheInputs = {
    baseImage: 'trainyard/python:3',
    baseImageId: 'sha256:aaaa',
    codeSha256: 'c0de',
    setup: 'make data',
    buildArgs: { BASE: 'trainyard/python:3', PIP_NO_INDEX: '1' },
    wheels: 'a.whl\t10\t1',
  };

  it('is a sha256, the same for the same inputs whatever the order of the args', () => {
    const key = cacheKey(inputs);
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    const reordered = { PIP_NO_INDEX: '1', BASE: 'trainyard/python:3' };
    expect(cacheKey({ ...inputs, buildArgs: reordered })).toBe(key);
  });

  it('changes with every input', () => {
    const key = cacheKey(inputs);
    const changed: Partial<CacheInputs>[] = [
      { baseImage: 'other:1' },
      { baseImageId: 'sha256:bbbb' },
      { baseImageId: null },
      { codeSha256: null },
      { setup: null },
      { setup: 'make data ' },
      { buildArgs: { ...inputs.buildArgs, PIP_INDEX_URL: 'http://x/' } },
      { wheels: 'a.whl\t10\t2' },
    ];
    const keys = changed.map((c) => cacheKey({ ...inputs, ...c }));
    expect(new Set([key, ...keys]).size).toBe(changed.length + 1);
  });
});

describe('classifyBuildError', () => {
  const pipStep = `Step 9/12 : RUN ${REQUIREMENTS_RUN}`;
  const setupStep = `Step 10/12 : RUN ${SETUP_RUN} && rm -rf /trainyard/build`;
  const exit = (code: number) => `The command '/bin/sh -c …' returned a non-zero code: ${code}`;

  it('names the requirement pip could not find, as the job’s fault', () => {
    const f = classifyBuildError({
      step: pipStep,
      output: [
        'Looking in links: /trainyard/wheels',
        'ERROR: Could not find a version that satisfies the requirement torch==9 (from versions: none)',
        'ERROR: No matching distribution found for torch==9',
      ],
      error: exit(1),
    });
    expect(f).toMatchObject({ reason: 'buildFailed', kind: 'user', retryable: false });
    expect(f.message).toBe(
      'requirements.txt could not be installed: ERROR: No matching distribution found for torch==9',
    );
  });

  it('quotes pip’s errors when no requirement is missing', () => {
    const f = classifyBuildError({
      step: pipStep,
      output: ['Collecting x', 'ERROR: Invalid requirement: "x=="'],
      error: exit(1),
    });
    expect(f.reason).toBe('buildFailed');
    expect(f.message).toContain('ERROR: Invalid requirement');
  });

  it('quotes the last lines of a failed setup with its exit code', () => {
    const output = ['one', 'two', '', 'three', 'four', 'five', 'six'];
    const f = classifyBuildError({ step: setupStep, output, error: exit(3) });
    expect(f.reason).toBe('buildFailed');
    expect(f.message).toBe('setup exited with code 3: two | three | four | five | six');
  });

  it('blames the job for a base image that does not exist', () => {
    const error = 'pull access denied for nosuch/image, repository does not exist';
    const f = classifyBuildError({ step: 'Step 2/10 : FROM ${BASE}', output: [], error });
    expect(f).toMatchObject({ reason: 'buildFailed', message: error });
  });

  it('blames the platform for anything else the engine reports', () => {
    const f = classifyBuildError({
      step: 'Step 4/10 : COPY code/ /workspace/',
      output: [],
      error: 'write /var/lib/docker/tmp/x: no space left on device',
    });
    expect(f).toMatchObject({ reason: 'buildInfrastructure', kind: 'system', retryable: true });
  });

  it('keeps messages under 1000 characters however long the output', () => {
    const output = Array.from({ length: 50 }, (_, i) => `${i} ${'x'.repeat(5_000)}`);
    for (const step of [pipStep, setupStep, 'Step 9/10 : RUN other']) {
      const f = classifyBuildError({ step, output, error: exit(1) + 'y'.repeat(5_000) });
      expect(f.message.length).toBeLessThan(1_000);
    }
  });
});
