// Builds and signs webhook deliveries the way Stripe does:
//   Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
// where the secret is used as a literal string (not base64-decoded).
import { expect, type APIRequestContext } from '@playwright/test';
import { createHmac, randomBytes } from 'node:crypto';

export const STRIPE_SECRET = 'whsec_e2e_secret';

export function uniqueSuffix(): string {
  return randomBytes(8).toString('hex');
}

export function paymentIntentSucceeded(eventId: string, orderId: string): string {
  const now = Math.floor(Date.now() / 1000);
  const suffix = uniqueSuffix();
  return JSON.stringify({
    id: eventId,
    object: 'event',
    api_version: '2024-06-20',
    created: now,
    livemode: false,
    pending_webhooks: 1,
    request: { id: `req_${suffix}`, idempotency_key: null },
    type: 'payment_intent.succeeded',
    data: {
      object: {
        id: `pi_e2e_${suffix}`,
        object: 'payment_intent',
        amount: 4200,
        amount_capturable: 0,
        amount_received: 4200,
        capture_method: 'automatic',
        client_secret: null,
        confirmation_method: 'automatic',
        created: now - 3,
        currency: 'eur',
        customer: null,
        description: 'e2e order',
        latest_charge: `ch_e2e_${suffix}`,
        livemode: false,
        metadata: { order_id: orderId },
        payment_method: `pm_e2e_${suffix}`,
        payment_method_types: ['card'],
        status: 'succeeded',
      },
    },
  });
}

export function stripeSignature(body: string, secret = STRIPE_SECRET, t = Math.floor(Date.now() / 1000)): string {
  const v1 = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  return `t=${t},v1=${v1}`;
}

/**
 * A payment and its full refund as current Stripe API versions announce them:
 * `payment_intent.succeeded`, then `charge.refunded` carrying only the running total
 * (`amount_refunded`), no embedded refund list.
 */
export function paymentAndFullRefund(orderId: string): { payment: string; refund: string; chargeId: string } {
  const now = Math.floor(Date.now() / 1000);
  const suffix = uniqueSuffix();
  const payment = JSON.parse(paymentIntentSucceeded(`evt_e2e_pay_${suffix}`, orderId));
  const paymentIntent: string = payment.data.object.id;
  const chargeId: string = payment.data.object.latest_charge;
  const refund = {
    id: `evt_e2e_refund_${suffix}`,
    object: 'event',
    api_version: '2024-06-20',
    created: now + 1,
    livemode: false,
    pending_webhooks: 1,
    request: { id: `req_${suffix}_r`, idempotency_key: null },
    type: 'charge.refunded',
    data: {
      object: {
        id: chargeId,
        object: 'charge',
        amount: 4200,
        amount_captured: 4200,
        amount_refunded: 4200,
        captured: true,
        currency: 'eur',
        metadata: { order_id: orderId },
        paid: true,
        payment_intent: paymentIntent,
        refunded: true,
        status: 'succeeded',
      },
    },
  };
  return { payment: JSON.stringify(payment), refund: JSON.stringify(refund), chargeId };
}

/** Posts a signed delivery to /webhooks/stripe as Stripe would; the receiver must take it (200). */
export async function deliver(request: APIRequestContext, body: string): Promise<void> {
  const response = await request.post('/webhooks/stripe', {
    headers: { 'Content-Type': 'application/json', 'Stripe-Signature': stripeSignature(body) },
    data: body,
  });
  expect(response.status(), await response.text()).toBe(200);
}
