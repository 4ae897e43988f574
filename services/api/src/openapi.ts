import { jsonSchemaTransform } from 'fastify-type-provider-zod';

/** The OpenAPI document's header; its paths and schemas come from the routes' zod schemas. */
export const OPENAPI_INFO = {
  openapi: '3.1.0',
  info: {
    title: 'Trainyard API',
    version: '0.1.0',
    description:
      'GPU training jobs and interactive sessions, scheduled on an event log. Errors are `{"error": {"code", "message", "details"}}`; each route lists the codes it can answer with.',
  },
  components: {
    securitySchemes: { bearer: { type: 'http' as const, scheme: 'bearer', bearerFormat: 'JWT' } },
  },
  security: [{ bearer: [] }],
  tags: [
    { name: 'auth', description: 'Logging in' },
    { name: 'users', description: 'Users (admins)' },
    { name: 'jobs', description: 'Training jobs' },
    { name: 'sessions', description: 'Interactive SSH sessions, and your SSH keys' },
    { name: 'system', description: 'Workers, health, limits and metrics' },
    { name: 'usage', description: 'GPU-hours held, per user and per job' },
  ],
};

type Transform = typeof jsonSchemaTransform;
type BodyByType = { content: Record<string, { schema: unknown }> };

const byContentType = (body: unknown): body is BodyByType =>
  typeof body === 'object' && body !== null && 'content' in body;

/**
 * The zod transform, taught one more shape: a body with a schema per content type (a submission
 * is JSON or multipart), which it otherwise passes to zod whole.
 */
export const documentRoute: Transform = (doc) => {
  const body = (doc.schema as { body?: unknown } | undefined)?.body;
  if (!byContentType(body)) return jsonSchemaTransform(doc);
  const { body: _body, ...rest } = doc.schema as Record<string, unknown>;
  const out = jsonSchemaTransform({ ...doc, schema: rest } as Parameters<Transform>[0]);
  const content: Record<string, { schema: unknown }> = {};
  for (const [type, { schema }] of Object.entries(body.content)) {
    const one = jsonSchemaTransform({
      ...doc,
      schema: { body: schema },
    } as Parameters<Transform>[0]);
    content[type] = { schema: (one.schema as { body?: unknown }).body };
  }
  return { ...out, schema: { ...out.schema, body: { content } } };
};
