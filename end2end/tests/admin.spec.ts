// The rest of the dashboard in the browser: the inbox that updates itself (and pauses while
// someone reads further down), times in the viewer's own time zone, settings without
// secrets, and an admin's API token made, used on /api/v1 and revoked.
import { expect, test } from '@playwright/test';
import { screenshot } from './screenshots';
import { signIn } from './session';
import { deliver, paymentIntentSucceeded, STRIPE_SECRET, uniqueSuffix } from './stripe';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

test.describe('in Kolkata', () => {
  test.use({ timezoneId: 'Asia/Kolkata' });

  test('new events appear without a reload, times read in the viewer\'s zone', async ({ page, request }) => {
    await signIn(page, 'viewer', '/events');
    await page.goto('/events');
    await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
    await expect(page.locator('#live-status')).toHaveAttribute('data-live', 'on');

    const eventId = `evt_live_${uniqueSuffix()}`;
    await deliver(request, paymentIntentSucceeded(eventId, `order-live-${uniqueSuffix()}`));
    const row = page.locator('#inbox-table tbody tr', { hasText: eventId });
    await expect(row).toBeVisible({ timeout: 15_000 });
    await expect(row.locator('time')).toContainText('UTC+5:30');
    await expect(row.locator('time .ago')).toContainText(/just now|s ago/);

    // Reading further down pauses it; back at the top it resumes. (Enough rows first, so the
    // page is taller than the window by more than the 240 px threshold.)
    for (let i = 0; i < 12; i++) {
      await deliver(request, paymentIntentSucceeded(`evt_fill_${uniqueSuffix()}`, `order-fill-${uniqueSuffix()}`));
    }
    await expect
      .poll(() => page.locator('#inbox-table tbody tr').count(), { timeout: 15_000 })
      .toBeGreaterThanOrEqual(13);
    await page.setViewportSize({ width: 1280, height: 300 });
    const scrollY = await page.evaluate(() => {
      window.scrollTo(0, document.body.scrollHeight);
      return window.scrollY;
    });
    expect(scrollY).toBeGreaterThan(240);
    await expect(page.locator('#live-status')).toHaveAttribute('data-live', 'paused', { timeout: 10_000 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await expect(page.locator('#live-status')).toHaveAttribute('data-live', 'on', { timeout: 10_000 });
  });
});

test('an admin reads the settings without a secret, the audit log and the users', async ({ page }, testInfo) => {
  await signIn(page, 'admin', '/settings');
  await page.goto('/settings');
  await expect(page).toHaveTitle('Settings · oncehook');
  await expect(page.locator('#providers-stripe')).toContainText('<redacted>');
  await expect(page.locator('#mapping-stripe')).toContainText('charge.refunded');
  await expect(page.locator('body')).not.toContainText(STRIPE_SECRET);
  await screenshot(page, testInfo, 'settings');

  await page.locator('#admin-audit').click();
  await expect(page).toHaveURL(/\/admin\/audit$/);
  await expect(page.locator('#audit-table')).toContainText('sign_in');
  await screenshot(page, testInfo, 'audit');
  await page.locator('#admin-users').click();
  await expect(page.locator('#users-table')).toContainText('e2e-operator');
});

test('an admin makes an API token, it works once shown, and revoking stops it', async ({ page, request }, testInfo) => {
  const name = `e2e-${uniqueSuffix()}`;
  await signIn(page, 'admin', '/admin/tokens');
  await page.goto('/admin/tokens');
  await expect(page.locator('.app[data-hydrated=true]')).toBeVisible();
  await page.locator('#new-token-form input[name=name]').fill(name);
  await page.locator('#new-token-form select[name=role]').selectOption('operator');
  await page.locator('#new-token-form button[type=submit]').click();
  const shown = page.locator('#new-token');
  await expect(shown).toBeVisible();
  const token = (await shown.textContent())!.trim();
  expect(token).toMatch(/^oh_/);
  await screenshot(page, testInfo, 'api-tokens');

  const api = (t: string) => request.get('/api/v1/dead-letters', { headers: { Authorization: `Bearer ${t}` } });
  expect((await api(token)).status()).toBe(200);

  await page.reload();
  await expect(page.locator('#new-token')).toHaveCount(0);
  const row = page.locator('#tokens-table tr', { hasText: name });
  await expect(row).toHaveAttribute('data-state', 'live');
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toHaveAttribute('data-state', 'revoked');
  expect((await api(token)).status()).toBe(401);
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('an operator has no token page, and the settings render', async ({ page }) => {
    await signIn(page, 'operator', '/settings');
    await page.goto('/settings');
    await expect(page.locator('#providers-stripe')).toBeVisible();
    const response = await page.goto('/admin/tokens');
    expect(response?.status()).toBe(403);
    await expect(page.locator('#tokens-table')).toHaveCount(0);
  });
});
