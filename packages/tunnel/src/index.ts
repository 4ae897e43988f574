export * from './channel.ts';
export { TunnelClient, type TunnelClientOptions } from './client.ts';
export { serveTunnel, type TunnelServer, type TunnelServerOptions } from './server.ts';
export {
  DEFAULT_KEEPALIVE_MS,
  DEFAULT_OPEN_TIMEOUT_MS,
  DEFAULT_WINDOW,
  FRAME_BYTES,
  OpenMessageSchema,
  type OpenMessage,
} from './frames.ts';
