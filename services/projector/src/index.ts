export {
  DEFAULT_PROJECTOR_OPTIONS,
  startProjector,
  type ProjectorOptions,
  type RunningProjector,
} from './projector.ts';
