// The users global-setup.ts adds with `oncehook user add`, and signing in as one of them
// through the real form.
import { expect, type Page } from '@playwright/test';

export const E2E_USERS = {
  admin: { name: 'e2e-admin', role: 'admin', password: 'e2e admin passphrase' },
  operator: { name: 'e2e-operator', role: 'operator', password: 'e2e operator passphrase' },
  viewer: { name: 'e2e-viewer', role: 'viewer', password: 'e2e viewer passphrase' },
} as const;

export type E2ERole = keyof typeof E2E_USERS;

/** Signs in through the sign-in form and waits for the top bar to name the user. */
export async function signIn(page: Page, role: E2ERole, next = '/'): Promise<void> {
  const user = E2E_USERS[role];
  await page.goto(`/sign-in?next=${encodeURIComponent(next)}`);
  await page.locator('input[name=username]').fill(user.name);
  await page.locator('input[name=password]').fill(user.password);
  await page.locator('#sign-in-form button[type=submit]').click();
  await expect(page.locator('#signed-in-user')).toHaveText(user.name);
}
