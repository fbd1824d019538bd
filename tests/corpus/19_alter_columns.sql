-- ALTER ADD/DROP/MODIFY/RENAME/CLEAR/COMMENT COLUMN, several actions in one ALTER, IF (NOT) EXISTS.
-- ;;
CREATE TABLE products (sku String, name String, price Float64, stock Int32) ENGINE = MergeTree ORDER BY sku
-- ;;
INSERT INTO products VALUES ('A-1', 'Anvil', 99.9, 10), ('B-2', 'Bucket', 5.5, 200), ('C-3', 'Crate', 12, 0)
-- ;;
ALTER TABLE products ADD COLUMN category LowCardinality(String) DEFAULT 'misc'
-- ;;
ALTER TABLE products ADD COLUMN IF NOT EXISTS category String
-- ;;
ALTER TABLE products ADD COLUMN weight_kg Nullable(Float32) AFTER name
-- ;;
ALTER TABLE products ADD COLUMN id UInt32 FIRST
-- ;;
INSERT INTO products (id, sku, name, weight_kg, price, stock, category) VALUES (4, 'D-4', 'Drill', 1.8, 149, 3, 'tools')
-- ;;
ALTER TABLE products MODIFY COLUMN price Decimal(10, 2)
-- ;;
ALTER TABLE products MODIFY COLUMN stock Int64 DEFAULT 0
-- ;;
ALTER TABLE products MODIFY COLUMN name String COMMENT 'display name'
-- ;;
ALTER TABLE products MODIFY COLUMN category REMOVE DEFAULT
-- ;;
ALTER TABLE products RENAME COLUMN stock TO on_hand
-- ;;
ALTER TABLE products RENAME COLUMN IF EXISTS nonexistent TO whatever
-- ;;
ALTER TABLE products COMMENT COLUMN on_hand 'units in the warehouse'
-- ;;
ALTER TABLE products CLEAR COLUMN weight_kg
-- ;;
ALTER TABLE products ADD COLUMN discontinued Bool DEFAULT false, ADD COLUMN tags Array(String) DEFAULT [], DROP COLUMN weight_kg
-- ;;
ALTER TABLE products DROP COLUMN IF EXISTS weight_kg
-- ;;
INSERT INTO products (id, sku, name, price, on_hand, category, discontinued, tags) VALUES (5, 'E-5', 'Easel', 45.00, 7, 'art', true, ['wood'])
-- ;;
ALTER TABLE products UPDATE tags = ['legacy'] WHERE discontinued
-- ;;
ALTER TABLE products MODIFY COLUMN on_hand Int64 CODEC(Delta, ZSTD(3))
-- ;;
ALTER TABLE products MODIFY COMMENT 'catalogue of products'
-- ;;
ALTER TABLE products MODIFY COLUMN sku String FIRST
-- ;;
ALTER TABLE products ADD COLUMN price_band String MATERIALIZED multiIf(price < 10, 'low', price < 100, 'mid', 'high')
-- ;;
ALTER TABLE products MATERIALIZE COLUMN price_band
-- ;;
ALTER TABLE products ADD COLUMN name_upper String ALIAS upper(name)
-- ;;
ALTER TABLE products MODIFY COLUMN discontinued Bool DEFAULT true
-- ;;
SELECT sku, name, price, on_hand, category, price_band, name_upper FROM products ORDER BY sku
-- ;;
DESCRIBE TABLE products
-- ;;
ALTER TABLE products DROP COLUMN tags, RENAME COLUMN on_hand TO stock
