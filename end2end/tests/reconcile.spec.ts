// Reconciliation in the browser, against a second real server started with `--demo` (its
// simulator is the provider: dropped and never-generated events, an API with a key) and
// `reconcile.auto_fix = false`, `interval = "0"`, so every diff waits for a person. An
// operator presses "Run now", watches the run end, sees the open diffs grouped by kind and
// fixes one with a click; without JavaScript the same page resolves a diff with a reason
// through a plain form; a viewer sees no buttons.
import { expect, test as base, type Page } from '@playwright/test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { screenshot } from './screenshots';
import { addE2EUsers, serve, type RunningOncehook } from './server';
import { signIn } from './session';

const test = base.extend<{}, { provider: RunningOncehook }>({
  provider: [
    async ({}, use) => {
      const dir = mkdtempSync(join(tmpdir(), 'oncehook-e2e-reconcile-'));
      const config = join(dir, 'oncehook.toml');
      writeFileSync(
        config,
        [
          // No [[providers]]: --demo refuses a configured one (its secret would sign made-up
          // traffic); its own provider calls the simulator at 1,000 calls/s, so a run
          // compares every order the simulator made so far within seconds.
          '[reconcile]',
          'interval = "0"',
          'auto_fix = false',
          '',
        ].join('\n'),
      );
      const databaseUrl = `sqlite://${join(dir, 'oncehook.db')}`;
      addE2EUsers(dir, databaseUrl);
      const server = await serve(dir, ['--demo', '--config', config, '--database-url', databaseUrl], 'reconcile-server.log');
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 60_000 },
  ],
  baseURL: async ({ provider }, use) => use(provider.url),
});

/** Runs a reconciliation from the page (hydrated) and waits for it to end. */
async function runNow(page: Page): Promise<void> {
  await page.goto('/reconciliation');
  await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
  await page.locator('#run-now button[type=submit]').click();
  await expect(page.locator('#run-started')).toContainText('Started run #');
  const newest = page.locator('#reconcile-runs tbody tr').first();
  // The page polls while the run runs, then reloads with what it found.
  await expect(newest).toHaveAttribute('data-status', 'succeeded', { timeout: 150_000 });
}

test('an operator runs a reconciliation, sees the diffs by kind and fixes one with a click', async ({ page }, testInfo) => {
  test.setTimeout(180_000);
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await signIn(page, 'operator', '/reconciliation');
  // Let the simulator send (and drop) a few hundred events first.
  await page.waitForTimeout(5_000);
  await runNow(page);
  const groups = page.locator('section.dlq-group[data-kind]');
  await expect(groups.first()).toBeVisible();
  await expect(page.locator('#reconcile-summary')).toContainText('open');
  await screenshot(page, testInfo, 'reconciliation');

  const fixable = page.locator('tr[data-state=open]:has(button.fix)').first();
  await expect(fixable).toBeVisible();
  const rowId = await fixable.getAttribute('id');
  await fixable.locator('button.fix').click();
  await expect(page.locator('#fix-result')).toContainText(/fixed/, { timeout: 60_000 });
  await expect(page.locator('#fix-result')).toContainText('Diff #');
  // The list reloads: the row has left the open diffs, and the history names who fixed it.
  await expect(page.locator(`#${rowId}[data-state=open]`)).toHaveCount(0);
  await page.goto('/reconciliation?state=fixed');
  await expect(page.locator(`#${rowId}`)).toContainText('fixed by e2e-operator');
  expect(problems).toEqual([]);
});

test('without JavaScript the page still resolves a diff with a reason; a viewer sees no buttons', async ({ browser, baseURL }) => {
  test.setTimeout(180_000);
  const context = await browser.newContext({ javaScriptEnabled: false, baseURL });
  const page = await context.newPage();
  await signIn(page, 'operator', '/reconciliation');
  await page.goto('/reconciliation');
  if ((await page.locator('tr[data-state=open]').count()) === 0) {
    // The plain "Run now" form: the server redirects back; reload until the run ended.
    await page.locator('#run-now button[type=submit]').click();
    await expect(async () => {
      await page.goto('/reconciliation');
      await expect(page.locator('#reconcile-runs tbody tr').first()).toHaveAttribute('data-status', 'succeeded', { timeout: 1_000 });
    }).toPass({ timeout: 150_000 });
  }
  const row = page.locator('tr[data-state=open]').first();
  const rowId = await row.getAttribute('id');
  await row.locator('input[name=reason]').fill('known test payment');
  await row.locator('button.resolve').click();
  await expect(page).toHaveURL(/\/reconciliation/);
  await page.goto('/reconciliation?state=resolved');
  await expect(page.locator(`#${rowId}`)).toContainText('known test payment');
  await expect(page.locator(`#${rowId}`)).toContainText('resolved by e2e-operator');
  await expect(page.locator('#reconcile-summary')).toBeVisible();
  await context.close();

  const viewer = await browser.newPage({ baseURL });
  await signIn(viewer, 'viewer', '/reconciliation');
  await viewer.goto('/reconciliation');
  await expect(viewer.locator('#reconcile-runs')).toBeVisible();
  await expect(viewer.locator('#run-now')).toHaveCount(0);
  await expect(viewer.locator('button.fix, button.resolve')).toHaveCount(0);
  await viewer.close();
});
