/** What the job views say of services: a job's kind and health check, an attempt's ports. */
import { z } from 'zod';
import { HealthCheckSchema, JobKindSchema } from '@trainyard/events';

/** The fields of a job's view that say whether it is a service, and how its health is checked. */
export const ServiceViewFields = {
  kind: JobKindSchema.describe('`service`: it runs until stopped; `job`: it runs to its end'),
  health: HealthCheckSchema.nullable().describe('a service’s health check, if it has one'),
};

/** An attempt's ports, as its view shows them. */
export const AttemptPortsSchema = z
  .array(z.number().int())
  .optional()
  .describe('a service’s: the ports it was given on its worker (reach them with `ssh -L`)');
