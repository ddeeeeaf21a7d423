// Dead-letter triage in the browser: a viewer sees no buttons, an operator redrives an item
// and sees the outcome; a bulk dry run says what would happen and changes nothing; a refund
// that came before its payment is redriven and the order's status and story change.
import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { deliver, paymentAndFullRefund, paymentIntentSucceeded, uniqueSuffix } from './stripe';
import { screenshot } from './screenshots';
import { signIn } from './session';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

/** An event with an API version nobody supports: dead-lettered at once (permanent). */
async function deadLetter(request: APIRequestContext): Promise<string> {
  const eventId = `evt_e2e_dlq_${uniqueSuffix()}`;
  const body = JSON.parse(paymentIntentSucceeded(eventId, `order-dlq-${uniqueSuffix()}`));
  body.api_version = '2015-01-01';
  await deliver(request, JSON.stringify(body));
  return eventId;
}

async function openWithRow(page: Page, eventId: string) {
  const row = page.locator('.dlq-table tbody tr', { hasText: eventId });
  await expect(async () => {
    await page.goto('/dlq');
    await expect(row).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  return row;
}

test('an operator redrives a refund that came before its payment; the order turns refunded', async ({ page, request }) => {
  const orderId = `order-redrive-${uniqueSuffix()}`;
  const { payment, refund } = paymentAndFullRefund(orderId);
  // The refund names only the charge and payment intent: its order is not known yet.
  const orphan = JSON.parse(refund);
  delete orphan.data.object.metadata;
  await deliver(request, JSON.stringify(orphan));
  await signIn(page, 'operator', '/dlq');
  await openWithRow(page, orphan.id);
  await deliver(request, payment);
  const badge = page.locator('#order-why .badge');
  await expect(async () => {
    await page.goto(`/orders/${orderId}`);
    await expect(badge).toHaveText('paid', { timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  await expect(page.locator('#timeline li[data-kind=redrive]')).toHaveCount(0);

  const row = await openWithRow(page, orphan.id);
  await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
  await row.locator('input[name=reason]').first().fill('payment arrived');
  await row.locator('button.redrive').click();
  await expect(page.locator('#redrive-result')).toContainText('requeued');

  await expect(async () => {
    await page.goto(`/orders/${orderId}`);
    await expect(badge).toHaveText('refunded', { timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  await expect(page.locator('#total-refunded')).toContainText('42.00 EUR');
  const redrive = page.locator('#timeline li[data-kind=redrive]');
  await expect(redrive).toHaveCount(1);
  await expect(redrive).toContainText('payment arrived');
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('a viewer sees dead letters but no redrive button', async ({ page, request }) => {
    const eventId = await deadLetter(request);
    await signIn(page, 'viewer', '/dlq');
    const row = await openWithRow(page, eventId);
    await expect(row.locator('button')).toHaveCount(0);
    await expect(page.locator('#dlq-summary')).toContainText('open');
  });

  test('an operator redrives one item and the page says what happened', async ({ page, request }, testInfo) => {
    const eventId = await deadLetter(request);
    await signIn(page, 'operator', '/dlq');
    const row = await openWithRow(page, eventId);
    await screenshot(page, testInfo, 'dlq');
    await row.locator('input[name=reason]').first().fill('e2e check');
    await row.locator('button.redrive').click();
    // The server redirects back to the page; the redrive is listed with its reason.
    await expect(page).toHaveURL(/\/dlq\??$/);
    const recent = page.locator('#recent-redrives tbody tr', { hasText: eventId }).first();
    await expect(recent).toContainText('e2e check');
    await expect(recent).toContainText('requeued');
  });

  test('a bulk dry run lists what would happen and changes nothing', async ({ page, request }, testInfo) => {
    const eventId = await deadLetter(request);
    await signIn(page, 'operator', '/dlq');
    await openWithRow(page, eventId);
    await page.goto(`/dlq?error=${encodeURIComponent('2015-01-01')}&preview=1`);
    const preview = page.locator('#redrive-preview');
    await expect(preview).toContainText('Dry run');
    await expect(preview).toContainText(eventId);
    await screenshot(page, testInfo, 'dlq-preview');
    // Still open: the preview changed nothing.
    await page.goto('/dlq');
    await expect(page.locator('.dlq-table tbody tr', { hasText: eventId })).toBeVisible();
  });
});
