import { defineConfig } from '@playwright/test';

// Debian's Chromium: Playwright's own browser download cannot work on these machines.
const chromiumArgs = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export default defineConfig({
  testDir: './tests',
  outputDir: './test-results',
  // Starts the real `oncehook serve` on a fresh SQLite database; see the file.
  globalSetup: './global-setup.ts',
  // One server, one database: tests share them, so they run one after another.
  workers: 1,
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: 0,
  timeout: 30_000,
  expect: { timeout: 5_000 },
  reporter: [['list']],
  use: {
    browserName: 'chromium',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: chromiumArgs,
    },
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
  },
});
