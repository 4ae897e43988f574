/**
 * Services Trainyard knows how to start: `trainyard service create jupyter` and `… inference`.
 * Each is a job spec of `kind: "service"`: a command that listens on `$TRAINYARD_PORT` on its
 * own loopback, and a health check that has it started again when it stops answering.
 */
import { CliError } from './errors.ts';

/** What a template is given from the command line. */
export interface TemplateOptions {
  name?: string;
  gpus?: number;
  vramGb?: number;
  /** The base image; null to run on a worker's host, where the tools must be installed. */
  image?: string | null;
  /** The model an inference server serves (a Hugging Face id or a path in the code). */
  model?: string;
}

export interface ServiceTemplate {
  description: string;
  /** How the user reaches it once `service open` forwards its port. */
  reach: (url: string) => string;
  spec: (o: TemplateOptions) => Record<string, unknown>;
}

const MODEL = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$/;

export const SERVICE_TEMPLATES: Record<string, ServiceTemplate> = {
  jupyter: {
    description: 'JupyterLab, with your code in its working directory',
    reach: (url) =>
      `open ${url}/lab and log in with the token JupyterLab printed (\`trainyard logs ID\`)`,
    spec: (o) => ({
      name: o.name ?? 'jupyter',
      kind: 'service',
      image: o.image === null ? undefined : (o.image ?? 'python'),
      ...(o.image !== null && { setup: 'pip install --user --no-cache-dir jupyterlab' }),
      command:
        'exec python3 -m jupyterlab --no-browser --ip=127.0.0.1 --port="$TRAINYARD_PORT" --ServerApp.root_dir="$PWD"',
      resources: { gpus: o.gpus ?? 0, ...(o.vramGb !== undefined && { vramGb: o.vramGb }) },
      health: { http: '/api', intervalS: 30, graceS: 900 },
      env: {},
    }),
  },
  inference: {
    description: 'an OpenAI-compatible inference server (vLLM) for --model',
    reach: (url) => `its OpenAI-compatible API is at ${url}/v1 (try ${url}/v1/models)`,
    spec: (o) => {
      if (!o.model) throw new CliError('--model: the inference template serves a model: name one');
      if (!MODEL.test(o.model))
        throw new CliError('--model: a model id such as Qwen/Qwen2.5-0.5B-Instruct, or a path');
      return {
        name: o.name ?? `inference-${o.model.split('/').pop()}`.slice(0, 128),
        kind: 'service',
        image: o.image === null ? undefined : (o.image ?? 'vllm/vllm-openai:latest'),
        command:
          'exec python3 -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$TRAINYARD_PORT" --model "$TRAINYARD_MODEL"',
        resources: { gpus: o.gpus ?? 1, ...(o.vramGb !== undefined && { vramGb: o.vramGb }) },
        health: { http: '/health', intervalS: 30, graceS: 1800 },
        env: { TRAINYARD_MODEL: o.model },
      };
    },
  },
};

/** The spec a template makes, or a clear error naming the templates there are. */
export function templateSpec(name: string, o: TemplateOptions): Record<string, unknown> {
  const template = SERVICE_TEMPLATES[name];
  if (!template) {
    throw new CliError(
      `no service template "${name}": there are ${Object.keys(SERVICE_TEMPLATES).join(', ')}`,
    );
  }
  const spec = template.spec(o);
  if (spec.image === undefined) delete spec.image;
  return spec;
}
