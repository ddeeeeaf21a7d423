// `oncehook serve --demo`, in the browser: a second real server, started with `--demo` on
// its own data directory, port and database, fills its dashboard by itself. Within 60 s of
// its start the overview shows received events, redeliveries and an open dead letter, and
// a refunded order is found from the inbox and reached through the top bar's search; every
// page says "demo data", before and after hydration. The suite's own server does not.
import { expect, test as base, type Locator, type Page } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { screenshot } from './screenshots';
import { addE2EUsers, serve, type RunningOncehook } from './server';
import { signIn } from './session';

const test = base.extend<{}, { demo: RunningOncehook }>({
  // Started when the first test that needs it runs, so its minute is measured from there.
  demo: [
    async ({}, use) => {
      const dir = mkdtempSync(join(tmpdir(), 'oncehook-e2e-demo-'));
      const databaseUrl = `sqlite://${join(dir, 'oncehook.db')}`;
      addE2EUsers(dir, databaseUrl);
      const server = await serve(dir, ['--demo', '--database-url', databaseUrl], 'demo-server.log');
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 60_000 },
  ],
  baseURL: async ({ demo }, use) => use(demo.url),
});

/** A KPI's number as the overview prints it (`1,234`). */
async function count(locator: Locator): Promise<number> {
  const text = (await locator.textContent({ timeout: 1_000 })) ?? '';
  const digits = text.replace(/[^0-9]/g, '');
  return digits === '' ? 0 : Number(digits);
}

/** The badge, in the top bar. */
function badge(page: Page): Locator {
  return page.locator('header.topbar #demo-badge');
}

/**
 * Orders the inbox links from events announcing refunds, fully refunded charges first;
 * the first whose page says `refunded`, or an error (the caller retries).
 */
async function findRefundedOrder(page: Page): Promise<string> {
  const listings = [
    `/events?type=charge.refunded&payload=${encodeURIComponent('data.object.refunded = true')}`,
    '/events?type=refund.updated',
    '/events?type=refund.created',
  ];
  const seen = new Set<string>();
  for (const listing of listings) {
    await page.goto(listing);
    const links = page.locator('#inbox-table tbody td a[href^="/orders"]');
    const orders = await links.evaluateAll((as) => as.map((a) => [a.getAttribute('href') ?? '', a.textContent ?? '']));
    for (const [href, orderId] of orders.slice(0, 10)) {
      if (seen.has(href)) continue;
      seen.add(href);
      await page.goto(href);
      if ((await page.locator('#order-why .badge').textContent({ timeout: 1_000 })) === 'refunded') return orderId;
    }
  }
  throw new Error(`no refunded order yet among ${seen.size} orders with refund events`);
}

test('serve --demo fills the overview within a minute, with a refunded order and a "demo data" badge', async ({
  page,
  demo,
}, testInfo) => {
  test.setTimeout(120_000);
  const deadline = demo.startedAt + 60_000;
  const left = () => Math.max(1_000, deadline - Date.now());
  const problems: string[] = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));

  await test.step('the sign-in page already says the data is made up', async () => {
    await page.goto('/sign-in');
    await expect(badge(page)).toHaveText('demo data');
  });

  await signIn(page, 'viewer');

  await test.step('the overview: events received, redeliveries, an open dead letter', async () => {
    await expect(async () => {
      await page.goto('/');
      expect(await count(page.locator('#kpi-received dd').first()), 'events received').toBeGreaterThan(0);
      // "N redelivered (x % of deliveries)"
      const note = (await page.locator('#kpi-received .kpi-note').textContent({ timeout: 1_000 })) ?? '';
      expect(Number(note.split(' ')[0].replace(/[^0-9]/g, '')), `redeliveries: ${note}`).toBeGreaterThan(0);
      expect(await count(page.locator('#kpi-dlq dd').first()), 'open dead letters').toBeGreaterThan(0);
    }).toPass({ timeout: left() });
  });

  await test.step('the badge is the same once the page has hydrated', async () => {
    await expect(page.locator('.app[data-hydrated=true]'), `hydration; browser said:\n${problems.join('\n')}`).toBeVisible();
    await expect(badge(page)).toHaveText('demo data');
    expect(problems, 'the browser reported no error (a hydration mismatch is one)').toEqual([]);
    await screenshot(page, testInfo, 'demo-overview');
  });

  await test.step('a refunded order, found from the inbox and reached by the search box', async () => {
    let orderId = '';
    await expect(async () => {
      orderId = await findRefundedOrder(page);
    }).toPass({ timeout: left() });
    await page.goto('/');
    await page.locator('#search-box').fill(orderId);
    await page.locator('#search-box').press('Enter');
    await expect(page.locator('#order-why .badge')).toHaveText('refunded');
    await expect(page.locator('#total-refunded dd')).not.toHaveText(/^0\.00 /);
    await expect(badge(page)).toHaveText('demo data');
    await screenshot(page, testInfo, 'demo-order');
  });

  expect(Date.now() - demo.startedAt, 'everything above within a minute of the start').toBeLessThanOrEqual(60_000);
  expect(problems).toEqual([]);
});

base.describe('the suite\'s own server, started without --demo', () => {
  base.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

  base('says nothing about demo data, before or after signing in', async ({ page }) => {
    await page.goto('/sign-in');
    await expect(page.locator('header.topbar')).toBeVisible();
    await expect(page.locator('#demo-badge')).toHaveCount(0);
    await signIn(page, 'viewer');
    await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
    await expect(page.locator('#demo-badge')).toHaveCount(0);
  });
});
