// Support's question, in the browser: "why is this order refunded?", answered from one
// page after one search by the id they hold (here the charge id from Stripe's dashboard),
// with and without JavaScript.
import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { screenshot } from './screenshots';
import { signIn } from './session';
import { deliver, paymentAndFullRefund, uniqueSuffix } from './stripe';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

/** A paid and fully refunded order; returns its id and the charge id. */
async function refundedOrder(request: APIRequestContext): Promise<{ orderId: string; chargeId: string }> {
  const orderId = `order-${uniqueSuffix()}`;
  const { payment, refund, chargeId } = paymentAndFullRefund(orderId);
  await deliver(request, payment);
  await deliver(request, refund);
  return { orderId, chargeId };
}

/** Searches from the top bar until the processor has filed the refund (it runs apart). */
async function findByCharge(page: Page, chargeId: string, orderId: string): Promise<void> {
  await expect(async () => {
    await page.goto('/');
    await page.locator('#search-box').fill(chargeId);
    await page.locator('#search-box').press('Enter');
    await expect(page).toHaveURL(new RegExp(`/orders/${orderId}$`), { timeout: 1_000 });
    await expect(page.locator('#order-why .badge')).toHaveText('refunded', { timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
}

async function readsWhyItIsRefunded(page: Page): Promise<void> {
  await expect(page).toHaveTitle(/^Order order-.* · oncehook$/);
  await expect(page.locator('#order-why')).toContainText('refund');
  await expect(page.locator('#total-paid')).toContainText('42.00 EUR');
  await expect(page.locator('#total-refunded')).toContainText('42.00 EUR');
  await expect(page.locator('#total-net')).toContainText('0.00 EUR');
  await expect(page.locator('#timeline li[data-kind=money]')).toHaveCount(2);
}

test('a viewer finds an order by its charge id and reads why it is refunded', async ({ page, request }, testInfo) => {
  const { orderId, chargeId } = await refundedOrder(request);
  await signIn(page, 'viewer');
  await findByCharge(page, chargeId, orderId);
  await readsWhyItIsRefunded(page);
  await screenshot(page, testInfo, 'order');
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('the search box and the order page work as plain HTML', async ({ page, request }) => {
    const { orderId, chargeId } = await refundedOrder(request);
    await signIn(page, 'viewer');
    await findByCharge(page, chargeId, orderId);
    await readsWhyItIsRefunded(page);
  });

  test('an id nobody knows says so', async ({ page }) => {
    await signIn(page, 'viewer');
    await page.goto('/');
    await page.locator('#search-box').fill('ch_nobody_knows');
    await page.locator('#search-box').press('Enter');
    await expect(page.locator('#search-nothing')).toContainText('ch_nobody_knows');
  });
});
