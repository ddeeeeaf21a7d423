// Sign-in, sign-out and the refusals a browser can see, against the real server.
import { expect, test } from '@playwright/test';
import { E2E_USERS, signIn } from './session';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

test('a page asks for sign-in and comes back to it afterwards; sign-out ends the session', async ({ page }, testInfo) => {
  await page.goto('/inbox?before=999999');
  await expect(page).toHaveURL(/\/sign-in\?next=/);
  await expect(page).toHaveTitle('Sign in · oncehook');
  const screenshot = testInfo.outputPath('sign-in.png');
  await page.screenshot({ path: screenshot, fullPage: true });
  await testInfo.attach('sign-in', { path: screenshot, contentType: 'image/png' });

  await page.locator('input[name=username]').fill(E2E_USERS.viewer.name);
  await page.locator('input[name=password]').fill(E2E_USERS.viewer.password);
  await page.locator('#sign-in-form button[type=submit]').click();
  await expect(page).toHaveURL(/\/inbox\?before=999999$/);
  await expect(page.locator('#signed-in-user')).toHaveText(E2E_USERS.viewer.name);

  await page.locator('#sign-out').click();
  await expect(page).toHaveURL(/\/sign-in\?signed_out=1$/);
  await page.goto('/');
  await expect(page).toHaveURL(/\/sign-in$/);
});

test('a wrong password is refused with a message', async ({ page }) => {
  await page.goto('/sign-in');
  await page.locator('input[name=username]').fill(E2E_USERS.viewer.name);
  await page.locator('input[name=password]').fill('not the password at all');
  await page.locator('#sign-in-form button[type=submit]').click();
  await expect(page).toHaveURL(/error=invalid/);
  await expect(page.locator('.form-error')).toContainText('do not match');
});

test('a cross-site POST is refused', async ({ page, playwright }) => {
  await signIn(page, 'operator');
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === 'oncehook_session');
  expect(session?.httpOnly).toBe(true);
  expect(session?.sameSite).toBe('Strict');
  // What a browser sends when another site submits a form here (SameSite=Strict alone
  // would also keep the cookie away; the server refuses it even with the cookie).
  const request = await playwright.request.newContext({ baseURL: process.env.ONCEHOOK_E2E_URL });
  const response = await request.post('/auth/sign-out', {
    headers: { Cookie: `oncehook_session=${session?.value}`, Origin: 'https://evil.example', 'Sec-Fetch-Site': 'cross-site' },
  });
  expect(response.status()).toBe(403);
  await page.reload();
  await expect(page.locator('#signed-in-user')).toHaveText(E2E_USERS.operator.name);
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('sign-in works as a plain form', async ({ page }) => {
    await signIn(page, 'admin');
    await expect(page.locator('.app')).not.toHaveAttribute('data-hydrated', 'true');
  });
});
