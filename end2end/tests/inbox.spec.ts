// The inbox against the real server: a signed Stripe delivery goes in through
// /webhooks/stripe and must show up as a row on the dashboard, with and without JavaScript.
import { expect, test, type Locator, type Page } from '@playwright/test';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { deliver, paymentIntentSucceeded, uniqueSuffix } from './stripe';
import { signIn } from './session';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

const STATUSES = /^(pending|processing|applied|duplicate|stale|refused|ignored|failed)$/;

/** Cell of a row by its column header, so the test doesn't depend on column order. */
async function cell(page: Page, row: Locator, header: string): Promise<Locator> {
  const headers = await page.locator('#inbox-table thead th').allTextContents();
  const index = headers.findIndex((h) => h.trim().toLowerCase().startsWith(header.toLowerCase()));
  expect(index, `column ${header} in ${headers.join(', ')}`).toBeGreaterThanOrEqual(0);
  return row.locator('td').nth(index);
}

/**
 * The receiver commits before it answers, so the row is normally there at once; the poll
 * covers a server under load. Each attempt is a fresh page load: the page is server-rendered.
 */
async function openInboxWithRow(page: Page, eventId: string, beforeEachLoad = () => {}): Promise<Locator> {
  const row = page.locator('#inbox-table tbody tr', { hasText: eventId });
  await expect(async () => {
    beforeEachLoad();
    const response = await page.goto('/events');
    expect(response?.status()).toBe(200);
    await expect(row).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  return row;
}

test('a signed delivery shows up in the inbox, and the page hydrates', async ({ page, request }, testInfo) => {
  const eventId = `evt_e2e_${uniqueSuffix()}`;
  await deliver(request, paymentIntentSucceeded(eventId, 'order-e2e-1'));

  const problems: string[] = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));

  await signIn(page, 'viewer');
  const row = await openInboxWithRow(page, eventId, () => (problems.length = 0));
  await expect(page).toHaveTitle('Inbox · oncehook');
  await expect(await cell(page, row, 'Provider')).toHaveText('stripe');
  await expect(await cell(page, row, 'Type')).toHaveText('payment_intent.succeeded');
  await expect(await cell(page, row, 'Deliveries')).toHaveText('1');
  await expect(row.locator('.badge')).toHaveText(STATUSES);

  // The receiver stores the event before the processor maps it to an order, so a row can
  // first appear without one; it gets it once processed.
  await test.step('the processor files it under its order', async () => {
    await expect(async () => {
      problems.length = 0;
      await page.reload();
      await expect(await cell(page, row, 'Order')).toHaveText('order-e2e-1', { timeout: 1_000 });
    }).toPass({ timeout: 15_000 });
  });

  const wasm = join(process.env.ONCEHOOK_E2E_SITE_ROOT ?? '', 'pkg', 'oncehook_bg.wasm');
  if (existsSync(wasm)) {
    await expect(page.locator('.app'), `hydration; browser said:\n${problems.join('\n')}`).toHaveAttribute(
      'data-hydrated',
      'true',
      { timeout: 10_000 },
    );
    expect(problems).toEqual([]);
  } else {
    testInfo.annotations.push({
      type: 'not checked',
      description: `hydration: ${wasm} is missing (run scripts/build-frontend.sh)`,
    });
  }

  const screenshot = testInfo.outputPath('inbox.png');
  await page.screenshot({ path: screenshot, fullPage: true });
  await testInfo.attach('inbox', { path: screenshot, contentType: 'image/png' });
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('the inbox is rendered on the server, one row however often an event arrives', async ({ page, request }, testInfo) => {
    const eventId = `evt_e2e_${uniqueSuffix()}`;
    const body = paymentIntentSucceeded(eventId, 'order-e2e-2');
    // The provider retrying a delivery it thinks was lost.
    await deliver(request, body);
    await deliver(request, body);

    await signIn(page, 'viewer');
    const row = await openInboxWithRow(page, eventId);
    await expect(page.locator('#inbox-table tbody tr', { hasText: eventId })).toHaveCount(1);
    await expect(await cell(page, row, 'Deliveries')).toHaveText('2');
    await expect(await cell(page, row, 'Event ID')).toHaveText(eventId);
    await expect(row.locator('.badge')).toHaveText(STATUSES);
    // Nothing ran in the browser: what is on screen came from the server.
    await expect(page.locator('.app')).not.toHaveAttribute('data-hydrated', 'true');

    const screenshot = testInfo.outputPath('inbox-no-js.png');
    await page.screenshot({ path: screenshot, fullPage: true });
    await testInfo.attach('inbox without JavaScript', { path: screenshot, contentType: 'image/png' });

    // The event's own page: both deliveries, and the original bytes as a download.
    await row.locator('td.event-id a').click();
    await expect(page).toHaveURL(/\/events\/\d+$/);
    await expect(page.locator('h1')).toHaveText(eventId);
    await expect(page.locator('#deliveries tbody tr')).toHaveCount(2);
    const href = await page.locator('#raw-download').getAttribute('href');
    const raw = await page.request.get(href ?? '');
    expect(raw.status()).toBe(200);
    expect(await raw.text()).toBe(body);
    const eventShot = testInfo.outputPath('event.png');
    await page.screenshot({ path: eventShot, fullPage: true });
    await testInfo.attach('event', { path: eventShot, contentType: 'image/png' });
  });
});
