// Starts the real server binary once for the whole run, the way an operator would:
//   oncehook serve --config <tmp>/oncehook.toml --listen 127.0.0.1:<free port>
//                  --database-url sqlite://<tmp>/oncehook.db
// and tells the tests where it is through ONCEHOOK_E2E_* environment variables.
//
// ONCEHOOK_BIN overrides the binary (default: <repo>/target/debug/oncehook);
// ONCEHOOK_SITE_ROOT overrides the built frontend (default: <repo>/target/site).
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { STRIPE_SECRET } from './tests/stripe';
import { E2E_USERS } from './tests/session';

const repo = resolve(__dirname, '..');

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const probe = createServer();
    probe.once('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? ok(address.port) : fail(new Error('no port'))));
    });
  });
}

async function waitForHealth(url: string, server: { exited: boolean }, log: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (server.exited) break;
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-40).join('\n') : '';
  throw new Error(`oncehook did not become healthy at ${url}/healthz\n--- server log ---\n${tail}`);
}

export default async function globalSetup() {
  const bin = process.env.ONCEHOOK_BIN ?? join(repo, 'target/debug/oncehook');
  const siteRoot = process.env.ONCEHOOK_SITE_ROOT ?? join(repo, 'target/site');
  if (!existsSync(bin)) {
    throw new Error(`${bin} not found: build it first (cargo build), or set ONCEHOOK_BIN`);
  }

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

  // One user per role, added the way an operator would (password on stdin), before the
  // server starts: with users present it creates no one-time admin.
  const databaseUrl = `sqlite://${join(dir, 'oncehook.db')}`;
  for (const user of Object.values(E2E_USERS)) {
    const added = spawnSync(bin, ['user', 'add', user.name, '--role', user.role, '--database-url', databaseUrl], {
      cwd: dir,
      input: `${user.password}\n`,
      encoding: 'utf8',
    });
    if (added.status !== 0) throw new Error(`oncehook user add ${user.name} failed:\n${added.stderr}`);
  }

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const log = join(dir, 'server.log');
  const out = openSync(log, 'a');
  const child = spawn(
    bin,
    ['serve', '--config', config, '--listen', `127.0.0.1:${port}`, '--database-url', databaseUrl],
    {
      // Its data dir (relative by default) lands in the temp dir, not in the checkout.
      cwd: dir,
      env: { ...process.env, ONCEHOOK_SITE_ROOT: siteRoot, RUST_LOG: process.env.RUST_LOG ?? 'info' },
      stdio: ['ignore', out, out],
    },
  );
  const state = { exited: false };
  child.on('exit', () => (state.exited = true));

  await waitForHealth(url, state, log);

  process.env.ONCEHOOK_E2E_URL = url;
  process.env.ONCEHOOK_E2E_SITE_ROOT = siteRoot;

  return async () => {
    if (!state.exited) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    // Kept next to the test results so a failure can be read after the temp dir is gone.
    mkdirSync(join(__dirname, 'test-results'), { recursive: true });
    copyFileSync(log, join(__dirname, 'test-results', 'server.log'));
    if (!process.env.ONCEHOOK_E2E_KEEP) rmSync(dir, { recursive: true, force: true });
  };
}
