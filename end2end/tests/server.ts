// Starting the real `oncehook` binary the way an operator does, on a free loopback port
// with its own temp directory (its relative `data/` lands there, not in the checkout):
// global-setup.ts starts the suite's server, demo.spec.ts a second one with `--demo`.
//
// ONCEHOOK_BIN overrides the binary (default: <repo>/target/debug/oncehook);
// ONCEHOOK_SITE_ROOT overrides the built frontend (default: <repo>/target/site).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { E2E_USERS } from './session';

const repo = resolve(__dirname, '../..');

export const BIN = process.env.ONCEHOOK_BIN ?? join(repo, 'target/debug/oncehook');
export const SITE_ROOT = process.env.ONCEHOOK_SITE_ROOT ?? join(repo, 'target/site');

export function freePort(): Promise<number> {
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

/** One user per role, added the way an operator would (password on stdin). Before the
 * server starts: with users present it creates no one-time admin. */
export function addE2EUsers(dir: string, databaseUrl: string): void {
  if (!existsSync(BIN)) {
    throw new Error(`${BIN} not found: build it first (cargo build), or set ONCEHOOK_BIN`);
  }
  for (const user of Object.values(E2E_USERS)) {
    const added = spawnSync(BIN, ['user', 'add', user.name, '--role', user.role, '--database-url', databaseUrl], {
      cwd: dir,
      input: `${user.password}\n`,
      encoding: 'utf8',
    });
    if (added.status !== 0) throw new Error(`oncehook user add ${user.name} failed:\n${added.stderr}`);
  }
}

/** An `oncehook` process started by `launch`. */
interface Launched {
  child: ChildProcess;
  state: { exited: boolean };
  log: string;
}

/** `oncehook ...args` in `dir`, its stdout and stderr appended to `dir/logFile`. */
function launch(dir: string, args: string[], env: NodeJS.ProcessEnv, logFile: string): Launched {
  const log = join(dir, logFile);
  const out = openSync(log, 'a');
  const child = spawn(BIN, args, { cwd: dir, env, stdio: ['ignore', out, out] });
  const state = { exited: false };
  child.on('exit', () => (state.exited = true));
  return { child, state, log };
}

/** SIGTERM (SIGKILL after 10 s), then the log is copied to end2end/test-results/`logName`,
 * so a failure can be read after the temp dir is gone. */
async function stopAndKeepLog({ child, state, log }: Launched, logName: string): Promise<void> {
  if (!state.exited) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  mkdirSync(join(__dirname, '..', 'test-results'), { recursive: true });
  copyFileSync(log, join(__dirname, '..', 'test-results', logName));
}

export interface RunningOncehook {
  url: string;
  /** When the process was started (ms since the epoch). */
  startedAt: number;
  /** SIGTERM (SIGKILL after 10 s), then the log is copied to end2end/test-results/`logName`. */
  stop(): Promise<void>;
}

/**
 * `oncehook serve --listen 127.0.0.1:<free port> ...args` in `dir`, logging to
 * `dir/server.log`; resolves once /healthz answers 200.
 */
export async function serve(dir: string, args: string[], logName: string): Promise<RunningOncehook> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = { ...process.env, ONCEHOOK_SITE_ROOT: SITE_ROOT, RUST_LOG: process.env.RUST_LOG ?? 'info' };
  delete env.ONCEHOOK_CONFIG;
  const startedAt = Date.now();
  const server = launch(dir, ['serve', '--listen', `127.0.0.1:${port}`, ...args], env, 'server.log');
  await waitForHealth(url, server.state, server.log);
  return {
    url,
    startedAt,
    async stop() {
      await stopAndKeepLog(server, logName);
      if (!process.env.ONCEHOOK_E2E_KEEP) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RunningSimulator {
  /** SIGTERM (SIGKILL after 10 s), then the log is copied to end2end/test-results/`logName`. */
  stop(): Promise<void>;
}

/**
 * `oncehook simulate ...args --keep-serving` in `dir`, logging to `dir/simulator.log`:
 * the run sends its webhooks, then the API keeps serving (and announcing the refunds made
 * through it) until stopped.
 */
export function simulate(dir: string, args: string[], logName: string): RunningSimulator {
  const env: NodeJS.ProcessEnv = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'info' };
  const simulator = launch(dir, ['simulate', ...args, '--keep-serving'], env, 'simulator.log');
  return { stop: () => stopAndKeepLog(simulator, logName) };
}
