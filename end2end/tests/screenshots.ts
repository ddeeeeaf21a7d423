// Screenshots for people: attached to the test report, and copied to
// $ONCEHOOK_E2E_SCREENSHOTS (docs/src/screenshots when refreshing the book's pictures).
import type { Page, TestInfo } from '@playwright/test';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export async function screenshot(page: Page, testInfo: TestInfo, name: string) {
  const path = testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path, fullPage: true });
  await testInfo.attach(name, { path, contentType: 'image/png' });
  if (process.env.ONCEHOOK_E2E_SCREENSHOTS) {
    mkdirSync(process.env.ONCEHOOK_E2E_SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(process.env.ONCEHOOK_E2E_SCREENSHOTS, `${name}.png`), fullPage: true });
  }
}

