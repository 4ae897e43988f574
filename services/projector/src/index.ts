export { startProjector, type ProjectorOptions, type RunningProjector } from './projector.ts';
