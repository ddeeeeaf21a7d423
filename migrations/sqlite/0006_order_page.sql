-- The order page lists an order's dead letters.
CREATE INDEX dead_letters_order ON dead_letters (order_id, id);
