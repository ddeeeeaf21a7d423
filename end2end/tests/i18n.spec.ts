// The dashboard in Portuguese (issue 45), in headless Chromium: a browser that asks for
// pt-BR walks the main pages in Portuguese, before and after hydration (the server and the
// WASM agree on the language, so nothing flashes back to English), with money as
// Brazilians write it; a person in an English browser chooses Português in Settings and
// keeps it. Screenshots of each page go to docs/src/screenshots/pt-BR-*.png when
// ONCEHOOK_E2E_SCREENSHOTS points there.
import { expect, test, type Page } from '@playwright/test';
import { screenshot } from './screenshots';
import { signIn } from './session';
import { deliver, paymentAndFullRefund, paymentIntentSucceeded, uniqueSuffix } from './stripe';

test.use({ baseURL: process.env.ONCEHOOK_E2E_URL });

/** Waits for hydration and checks that it changed no word back to English. */
async function hydratedInPortuguese(page: Page): Promise<void> {
  await expect(page.locator('html')).toHaveAttribute('lang', 'pt-BR');
  await expect(page.locator('.app')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.locator('nav.mainnav')).toContainText('Visão geral');
  await expect(page.locator('nav.mainnav')).toContainText('Mensagens mortas');
}

/** The same delivery in reais: R$ 1.234,56 instead of 42.00 EUR. */
function inReais(body: string, amounts: string[]): string {
  const event = JSON.parse(body);
  event.data.object.currency = 'brl';
  for (const field of amounts) event.data.object[field] = 123456;
  return JSON.stringify(event);
}

function watchConsole(page: Page): string[] {
  const problems: string[] = [];
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() === 'error' || /hydrat/i.test(text)) problems.push(text);
  });
  page.on('pageerror', (error) => problems.push(error.message));
  return problems;
}

test.describe('a browser that asks for Portuguese', () => {
  test.use({ locale: 'pt-BR', timezoneId: 'America/Sao_Paulo' });

  test('walks the main pages in Portuguese', async ({ page, request }, testInfo) => {
    const problems = watchConsole(page);
    // A paid and fully refunded order in reais, and an event whose order is unknown (a
    // dead letter at once: max_attempts = 1 in global-setup.ts).
    const orderId = `pedido-${uniqueSuffix()}`;
    const { payment, refund } = paymentAndFullRefund(orderId);
    await deliver(request, inReais(payment, ['amount', 'amount_received']));
    await deliver(request, inReais(refund, ['amount', 'amount_captured', 'amount_refunded']));
    const orphan = JSON.parse(paymentIntentSucceeded(`evt_e2e_orfao_${uniqueSuffix()}`, orderId));
    orphan.type = 'payment_intent.payment_failed';
    orphan.data.object.metadata = {};
    await deliver(request, JSON.stringify(orphan));

    await page.goto('/sign-in');
    await expect(page.locator('html')).toHaveAttribute('lang', 'pt-BR');
    await expect(page.locator('h1')).toHaveText('Entrar');
    await expect(page.locator('#sign-in-form')).toContainText('Nome de usuário');
    await screenshot(page, testInfo, 'pt-BR-sign-in');

    await signIn(page, 'viewer');
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toHaveText('Visão geral');
    await expect(page.locator('#kpi-received dt')).toHaveText('Eventos recebidos');
    await expect(page.locator('#money-moved h2')).toHaveText('Dinheiro movimentado');
    await screenshot(page, testInfo, 'pt-BR-overview');

    await page.goto('/events');
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toHaveText('Caixa de entrada');
    await expect(page.locator('#inbox-table thead')).toContainText('Entregas');
    await screenshot(page, testInfo, 'pt-BR-inbox');

    // The order: its money in reais as Brazilians write it, the story in sentence case.
    await expect(async () => {
      await page.goto(`/orders/${orderId}`);
      await expect(page.locator('#total-refunded')).toContainText('R$\u00a01.234,56', { timeout: 1_000 });
    }).toPass({ timeout: 15_000 });
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toContainText('Pedido');
    await expect(page.locator('#total-paid dt')).toHaveText('Pago');
    await expect(page.locator('#total-net')).toContainText('R$\u00a00,00');
    await expect(page.locator('#timeline h2')).toContainText('Histórico');
    await expect(page.locator('#order-why .badge')).toHaveText('reembolsado');
    // Dates as day/month/year in the browser's own zone (São Paulo is UTC-3).
    await expect(page.locator('#timeline time').first()).toContainText(/\d\d\/\d\d\/\d{4} \d\d:\d\d:\d\d UTC-3/);
    // No `text-transform: capitalize` turning "Caixa de saída" into "Caixa De Saída".
    for (const kind of await page.locator('#timeline .kind').all()) {
      expect(await kind.evaluate((el) => getComputedStyle(el).textTransform)).toBe('none');
    }
    await screenshot(page, testInfo, 'pt-BR-order');

    await page.goto('/dlq');
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toHaveText('Mensagens mortas');
    await expect(page.locator('#dlq-filter')).toContainText('Classe');
    await screenshot(page, testInfo, 'pt-BR-dlq');

    await page.goto('/reconciliation');
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toHaveText('Conciliação');
    await screenshot(page, testInfo, 'pt-BR-reconciliation');

    await page.goto('/settings');
    await hydratedInPortuguese(page);
    await expect(page.locator('h1')).toHaveText('Configurações');
    await expect(page.locator('#language h2')).toHaveText('Seu idioma');
    await screenshot(page, testInfo, 'pt-BR-settings');

    // No hydration warning, no error, on any page so far.
    expect(problems, problems.join('\n')).toEqual([]);

    // (Its 404 is the one console error a not-found page has.)
    await page.goto('/orders/nenhum-pedido-assim');
    await expect(page.locator('.panel-error h2')).toHaveText('Não encontrado');
    await screenshot(page, testInfo, 'pt-BR-not-found');
  });
});

test.describe('a person in an English browser', () => {
  test.use({ locale: 'en-US' });

  test('chooses Português in Settings and keeps it', async ({ page }) => {
    await signIn(page, 'operator', '/settings');
    await expect(page.locator('html')).toHaveAttribute('lang', 'en');
    await expect(page.locator('h1')).toHaveText('Settings');
    try {
      await page.locator('#language-select').selectOption('pt-BR');
      await page.locator('#language-save').click();
      await expect(page.locator('#language-outcome')).toHaveText('Idioma salvo.');
      await hydratedInPortuguese(page);
      await expect(page.locator('#language-select')).toHaveValue('pt-BR');
      // Every page now, whatever the browser asks for.
      await page.goto('/');
      await expect(page.locator('h1')).toHaveText('Visão geral');
    } finally {
      // Back to automatic, so the other specs' operator reads English again.
      await page.goto('/settings');
      await page.locator('#language-select').selectOption('');
      await page.locator('#language-save').click();
      await expect(page.locator('html')).toHaveAttribute('lang', 'en');
    }
    await expect(page.locator('#language-outcome')).toHaveText('Language saved.');
  });
});
