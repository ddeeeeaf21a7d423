// The manager's question, in the browser: "is the payment integration healthy?" The
// overview's KPIs and SVG charts render with data, with and without JavaScript.
import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { screenshot } from './screenshots';
import { signIn } from './session';
import { deliver, paymentAndFullRefund, uniqueSuffix } from './stripe';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

async function deliverTraffic(request: APIRequestContext): Promise<void> {
  const { payment, refund } = paymentAndFullRefund(`order-ov-${uniqueSuffix()}`);
  for (const body of [payment, payment, refund]) {
    await deliver(request, body);
  }
}

async function chartsHaveData(page: Page): Promise<void> {
  await expect(async () => {
    await page.goto('/');
    await expect(page.locator('#chart-traffic svg rect').first()).toBeVisible({ timeout: 1_000 });
    await expect(page.locator('#chart-latency svg rect').first()).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  await expect(page).toHaveTitle('Overview · oncehook');
  await expect(page.locator('#kpi-received dd').first()).not.toHaveText('0');
  await expect(page.locator('#money-moved')).toContainText('EUR');
  await expect(page.locator('#chart-traffic svg text.tick').first()).toBeVisible();
}

test('the overview charts render with data, and the range can be changed', async ({ page, request }, testInfo) => {
  await deliverTraffic(request);
  await signIn(page, 'viewer');
  await chartsHaveData(page);
  await screenshot(page, testInfo, 'overview');
  await page.getByRole('link', { name: 'Last 7 days' }).click();
  await expect(page).toHaveURL(/\?range=7d$/);
  await expect(page.locator('.range-picker [aria-current=page]')).toHaveText('Last 7 days');
  await expect(page.locator('#chart-traffic svg rect').first()).toBeVisible();
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('the overview is complete as plain HTML', async ({ page, request }) => {
    await deliverTraffic(request);
    await signIn(page, 'viewer');
    await chartsHaveData(page);
  });
});
