import { z } from 'zod';
import { JobSpecSchema } from '@trainyard/events';
import { NewUserSchema } from './routes/users.ts';

const error = {
  description: 'Error',
  content: {
    'application/json': {
      schema: {
        type: 'object',
        properties: {
          error: {
            type: 'object',
            properties: { code: { type: 'string' }, message: { type: 'string' }, details: {} },
            required: ['code', 'message'],
          },
        },
      },
    },
  },
};

const json = (schema: object) => ({ content: { 'application/json': { schema } } });
const ok = (description: string) => ({ description });
const secured = [{ bearer: [] }];

function op(summary: string, responses: Record<string, unknown>, extra: object = {}) {
  return {
    summary,
    security: secured,
    responses: { ...responses, '4XX': error, '5XX': error },
    ...extra,
  };
}

const idParam = [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }];

/** The OpenAPI 3.1 description of the HTTP API, built from the same zod schemas it validates with. */
export function openApiDocument() {
  const spec = z.toJSONSchema(JobSpecSchema, { io: 'input' });
  return {
    openapi: '3.1.0',
    info: { title: 'Trainyard API', version: '0.1.0' },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
      schemas: { JobSpec: spec, NewUser: z.toJSONSchema(NewUserSchema, { io: 'input' }) },
    },
    paths: {
      '/v1/auth/login': {
        post: {
          summary: 'Exchange a username and password for a bearer token',
          security: [],
          requestBody: json({
            type: 'object',
            properties: { username: { type: 'string' }, password: { type: 'string' } },
            required: ['username', 'password'],
          }),
          responses: { '200': ok('A token'), '4XX': error },
        },
      },
      '/v1/users': {
        post: op(
          'Create a user (admin)',
          { '201': ok('Created') },
          {
            requestBody: json({ $ref: '#/components/schemas/NewUser' }),
          },
        ),
        get: op('List users (admin)', { '200': ok('Users') }),
      },
      '/v1/jobs': {
        post: op(
          'Submit a job: multipart with a `spec` field and a `code` file, or JSON spec alone',
          { '202': ok('Accepted: {id, status, seq}') },
          {
            requestBody: {
              content: {
                'multipart/form-data': {
                  schema: {
                    type: 'object',
                    properties: {
                      spec: { type: 'string', description: 'JobSpec as JSON' },
                      code: { type: 'string', format: 'binary' },
                    },
                    required: ['spec'],
                  },
                },
                'application/json': { schema: { $ref: '#/components/schemas/JobSpec' } },
              },
            },
          },
        ),
        get: op(
          'List your jobs (admins: all), newest first',
          { '200': ok('Jobs') },
          {
            parameters: [
              { name: 'status', in: 'query', schema: { type: 'string' } },
              { name: 'limit', in: 'query', schema: { type: 'integer', maximum: 500 } },
              {
                name: 'after',
                in: 'query',
                schema: { type: 'integer' },
                description: 'wait for this stream sequence',
              },
            ],
          },
        ),
      },
      '/v1/jobs/{id}': {
        get: op(
          'A job with its attempts',
          { '200': ok('Job') },
          {
            parameters: [...idParam, { name: 'after', in: 'query', schema: { type: 'integer' } }],
          },
        ),
      },
      '/v1/jobs/{id}/cancel': {
        post: op('Cancel a job', { '202': ok('Cancelling') }, { parameters: idParam }),
      },
      '/v1/jobs/{id}/events': {
        get: op("The job's events, hash-chained", { '200': ok('Events') }, { parameters: idParam }),
      },
      '/v1/jobs/{id}/logs': {
        get: op(
          'The log so far; follow=true streams until the job ends',
          { '200': ok('text/plain') },
          {
            parameters: [...idParam, { name: 'follow', in: 'query', schema: { type: 'boolean' } }],
          },
        ),
      },
      '/v1/jobs/{id}/outputs': {
        get: op(
          'Output files: [{path, size, sha256}]',
          { '200': ok('Outputs') },
          { parameters: idParam },
        ),
      },
      '/v1/jobs/{id}/outputs/{path}': {
        get: op(
          'One output file',
          { '200': ok('The bytes') },
          {
            parameters: [
              ...idParam,
              { name: 'path', in: 'path', required: true, schema: { type: 'string' } },
            ],
          },
        ),
      },
      '/v1/workers': { get: op('Workers and their GPUs', { '200': ok('Workers') }) },
      '/healthz': {
        get: {
          summary: 'Health',
          security: [],
          responses: { '200': ok('Healthy'), '503': ok('Unhealthy') },
        },
      },
      '/metrics': {
        get: {
          summary: 'Prometheus metrics',
          security: [],
          responses: { '200': ok('text/plain') },
        },
      },
    },
  };
}
