-- Map columns and Nested structures (flattened arrays), with their functions.
-- ;;
CREATE TABLE configs
(
    service String,
    settings Map(String, String),
    limits Map(String, UInt64),
    weights Map(UInt8, Float64),
    labels Map(LowCardinality(String), Array(String))
)
ENGINE = MergeTree
ORDER BY service
-- ;;
INSERT INTO configs VALUES ('api', {'timeout': '30s', 'retries': '3'}, {'rps': 1000, 'burst': 2000}, {1: 0.5, 2: 0.25}, {'env': ['prod', 'eu']})
-- ;;
INSERT INTO configs VALUES ('worker', {}, {}, {}, {})
-- ;;
INSERT INTO configs VALUES ('cron', map('schedule', '*/5 * * * *', 'tz', 'UTC'), map('max_runtime', 600), mapFromArrays([1, 2, 3], [0.1, 0.2, 0.7]), map('owner', ['ops']))
-- ;;
INSERT INTO configs VALUES ('quote''s', {'k''ey': 'va''lue', 'json': '{"a": 1}'}, {'x': 0}, {255: -1.0}, {'': []})
-- ;;
INSERT INTO configs SELECT concat('svc', toString(number)), map('n', toString(number)), map('limit', number * 10), map(toUInt8(number), number / 10), map('idx', [toString(number)]) FROM numbers(25)
-- ;;
ALTER TABLE configs UPDATE settings = mapUpdate(settings, map('updated', 'yes')) WHERE service LIKE 'svc1%'
-- ;;
ALTER TABLE configs UPDATE limits = mapAdd(limits, map('rps', toUInt64(1))) WHERE mapContains(limits, 'rps')
-- ;;
ALTER TABLE configs DELETE WHERE settings['n'] = '7'
-- ;;
ALTER TABLE configs ADD COLUMN setting_keys Array(String) MATERIALIZED mapKeys(settings)
-- ;;
CREATE TABLE config_flat (service String, key String, value String) ENGINE = MergeTree ORDER BY (service, key)
-- ;;
INSERT INTO config_flat SELECT service, k, v FROM configs ARRAY JOIN mapKeys(settings) AS k, mapValues(settings) AS v
-- ;;
CREATE TABLE orders
(
    order_id UInt64,
    customer String,
    items Nested
    (
        sku String,
        qty UInt32,
        price Decimal(10, 2)
    )
)
ENGINE = MergeTree
ORDER BY order_id
-- ;;
INSERT INTO orders VALUES (1, 'ann', ['A-1', 'B-2'], [1, 3], [9.99, 1.50])
-- ;;
INSERT INTO orders (order_id, customer, items.sku, items.qty, items.price) VALUES (2, 'bob', ['C-3'], [10], [0.25])
-- ;;
INSERT INTO orders VALUES (3, 'cat', [], [], [])
-- ;;
INSERT INTO orders SELECT 10 + number, concat('c', toString(number % 4)), arrayMap(i -> concat('SKU-', toString(i)), range(number % 4)), arrayMap(i -> toUInt32(i + 1), range(number % 4)), arrayMap(i -> toDecimal32(i * 2.5, 2), range(number % 4)) FROM numbers(20)
-- ;;
CREATE TABLE order_lines (order_id UInt64, sku String, qty UInt32, price Decimal(10, 2)) ENGINE = MergeTree ORDER BY (order_id, sku)
-- ;;
INSERT INTO order_lines SELECT order_id, items.sku, items.qty, items.price FROM orders ARRAY JOIN items
-- ;;
ALTER TABLE orders UPDATE customer = upper(customer) WHERE length(items.sku) > 2
-- ;;
ALTER TABLE orders ADD COLUMN items.discount Array(UInt8) AFTER items.price
-- ;;
INSERT INTO orders (order_id, customer, items.sku, items.qty, items.price, items.discount) VALUES (4, 'dee', ['D-4', 'E-5'], [2, 2], [5.00, 6.00], [10, 0])
-- ;;
CREATE TABLE customer_totals (customer String, spend Decimal(38, 2), skus Map(String, UInt64)) ENGINE = MergeTree ORDER BY customer
-- ;;
INSERT INTO customer_totals SELECT customer, sum(qty * price), sumMap(map(sku, toUInt64(qty))) FROM order_lines INNER JOIN orders USING (order_id) GROUP BY customer
-- ;;
SELECT service, settings['timeout'], limits['rps'] FROM configs WHERE service = 'api'
-- ;;
ALTER TABLE configs MODIFY COLUMN limits Map(String, UInt32)
-- ;;
ALTER TABLE configs DROP COLUMN weights
