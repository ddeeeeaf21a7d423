-- The dashboard language each person chose (`en`, `pt-BR`); NULL follows the browser's
-- Accept-Language.
ALTER TABLE users ADD COLUMN locale TEXT;
