import { writeFileSync } from 'node:fs';
import { natsAccountsConfig } from '@trainyard/servers';

const file = new URL('../infra/nats/accounts.conf', import.meta.url);
writeFileSync(file, natsAccountsConfig());
console.log(`wrote ${file.pathname}`);
