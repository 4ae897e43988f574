export * from './ssh-server.ts';
export { startGateway, type GatewayOptions, type RunningGateway } from './gateway.ts';
export { fingerprintOf } from './host-key.ts';
