-- What the receiver fetched from a provider's API for a thin notification (Mercado Pago
-- sends `type`, `action` and `data.id`; the payment itself comes from GET /v1/payments/{id}).
-- The processor maps it instead of raw_body, which stays the delivery as it came.
ALTER TABLE inbox_events ADD COLUMN fetched_body BLOB;
