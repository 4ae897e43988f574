export {
  DEFAULT_BUILDER_OPTIONS,
  startBuilder,
  type BuilderOptions,
  type RunningBuilder,
} from './builder.ts';
