// Starts the real server binary once for the whole run, the way an operator would:
//   oncehook serve --config <tmp>/oncehook.toml --listen 127.0.0.1:<free port>
//                  --database-url sqlite://<tmp>/oncehook.db
// and tells the tests where it is through ONCEHOOK_E2E_* environment variables.
// (tests/server.ts starts it; ONCEHOOK_BIN and ONCEHOOK_SITE_ROOT are read there.)
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { STRIPE_SECRET } from './tests/stripe';
import { addE2EUsers, serve, SITE_ROOT } from './tests/server';

export default async function globalSetup() {
  const dir = mkdtempSync(join(tmpdir(), 'oncehook-e2e-'));
  const config = join(dir, 'oncehook.toml');
  writeFileSync(
    config,
    [
      '[[providers]]',
      'name = "stripe"',
      'scheme = "stripe"',
      `secrets = ["${STRIPE_SECRET}"]`,
      'tolerance_secs = 300',
      '',
      // An event whose order is not known yet goes to the dead-letter queue at once, so a
      // test can redrive it after the payment arrives (production retries for hours).
      '[processor.retry]',
      'max_attempts = 1',
      '',
    ].join('\n'),
  );

  const databaseUrl = `sqlite://${join(dir, 'oncehook.db')}`;
  addE2EUsers(dir, databaseUrl);
  const server = await serve(dir, ['--config', config, '--database-url', databaseUrl], 'server.log');

  process.env.ONCEHOOK_E2E_URL = server.url;
  process.env.ONCEHOOK_E2E_SITE_ROOT = SITE_ROOT;

  return () => server.stop();
}
