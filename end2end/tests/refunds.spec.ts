// Refunds sent from oncehook, in the browser, against a real server whose provider API is a
// real `oncehook simulate` run. The run plans no refunds and no disputes of its own, so the
// order the operator refunds changes only through the refund made here: a paid order
// refunded by 1.00 is partially refunded, whenever the test runs. (Beside `--demo`, whose
// own refunds arrive seconds to minutes after a payment, a fresh paid order could be fully
// refunded by the simulation while the test watched it.)
import { expect, test as base } from '@playwright/test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { screenshot } from './screenshots';
import { addE2EUsers, freePort, serve, simulate, type RunningOncehook } from './server';
import { signIn } from './session';

const SECRET = 'whsec_e2e_refunds_0123456789abcdef';
const API_KEY = 'sk_test_e2e_refunds_0123456789abcdef';

const test = base.extend<{}, { provider: RunningOncehook }>({
  provider: [
    async ({}, use) => {
      const dir = mkdtempSync(join(tmpdir(), 'oncehook-e2e-refunds-'));
      const apiPort = await freePort();
      const config = join(dir, 'oncehook.toml');
      writeFileSync(
        config,
        [
          '[[providers]]',
          'name = "stripe"',
          'scheme = "stripe"',
          `secrets = ["${SECRET}"]`,
          `api_base = "http://127.0.0.1:${apiPort}"`,
          `api_key = "${API_KEY}"`,
          '',
        ].join('\n'),
      );
      const scenario = join(dir, 'scenario.toml');
      writeFileSync(scenario, ['[mix]', 'refunded = 0.0', 'disputed = 0.0', ''].join('\n'));
      const databaseUrl = `sqlite://${join(dir, 'oncehook.db')}`;
      addE2EUsers(dir, databaseUrl);
      const server = await serve(dir, ['--config', config, '--database-url', databaseUrl], 'refunds-server.log');
      const simulator = simulate(
        dir,
        [
          '--target', `${server.url}/webhooks/stripe`,
          '--secret', SECRET,
          '--scenario', 'steady',
          '--scenario-file', scenario,
          '--api-listen', `127.0.0.1:${apiPort}`,
          '--api-key', API_KEY,
          '--orders', '30',
          '--duration', '3',
        ],
        'refunds-simulator.log',
      );
      await use(server);
      await simulator.stop();
      await server.stop();
    },
    { scope: 'worker', timeout: 60_000 },
  ],
  baseURL: async ({ provider }, use) => use(provider.url),
});

test('an operator refunds part of a paid order and watches it go from requested to confirmed', async ({ page }, testInfo) => {
  test.setTimeout(120_000);
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await signIn(page, 'operator', '/events?type=payment_intent.succeeded');
  // A paid order of the simulator's: the newest payment events link to their orders.
  let orderHref = '';
  await expect(async () => {
    await page.goto('/events?type=payment_intent.succeeded');
    const links = await page
      .locator('#inbox-table tbody td a[href^="/orders"]')
      .evaluateAll((as) => as.map((a) => a.getAttribute('href') ?? ''));
    for (const href of links.slice(0, 15)) {
      await page.goto(href);
      if ((await page.locator('#order-why .badge').textContent({ timeout: 1_000 })) === 'paid') {
        orderHref = href;
        return;
      }
    }
    throw new Error(`no paid order among ${links.length}`);
  }).toPass({ timeout: 60_000 });
  await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
  const refundedBefore = (await page.locator('#total-refunded dd').textContent()) ?? '';

  await page.locator('#refund-form input[name=refund]').fill('1.00');
  await page.locator('#refund-form input[name=reason]').fill('goodwill gesture');
  await page.locator('#refund-form button[type=submit]').click();
  const confirm = page.locator('#refund-confirm');
  await expect(confirm).toContainText(/Refund 1(\.00)? [A-Z]{3}/);
  await expect(confirm).toContainText('goodwill gesture');
  await screenshot(page, testInfo, 'refund-confirm');
  // A double click is one refund: the form's key makes the second post a replay.
  await page.locator('#refund-confirm-form button[type=submit]').dblclick();

  // Back on the order: in flight first, then confirmed by the provider's webhook.
  await expect(page).toHaveURL(new RegExp(`${orderHref.replace(/[.?*+^$()|[\]\\]/g, '\\$&')}$`));
  const story = page.locator('#timeline li[data-kind=command]');
  await expect(page.locator('#order-pending, #timeline li[data-kind=command]').first()).toBeVisible();
  await expect(page.locator('#timeline li[data-kind=command]', { hasText: 'asked for by e2e-operator' })).toHaveCount(1);
  await expect(story.filter({ hasText: /refund command #\d+ confirmed/ })).toHaveCount(1, { timeout: 60_000 });
  await expect(page.locator('#order-pending')).toHaveCount(0);
  // In place (the page read it again while it was in flight) and after a reload alike: the
  // status, the totals and the sentence from one snapshot of the order.
  for (const reloaded of [false, true]) {
    if (reloaded) await page.reload();
    await expect(page.locator('#total-refunded dd')).not.toHaveText(refundedBefore);
    // The badge reads in words; the status as stored is its data-status.
    await expect(page.locator('#order-why .badge')).toHaveText('partially refunded');
    await expect(page.locator('#order-why .badge')).toHaveAttribute('data-status', 'partially_refunded');
    await expect(page.locator('#order-why')).toContainText('came from command #');
  }
  await screenshot(page, testInfo, 'refund-confirmed');
  expect(problems).toEqual([]);
});
