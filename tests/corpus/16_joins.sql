-- INSERT ... SELECT joining the object's own tables: INNER/LEFT/ANY/ASOF/SEMI/ANTI, subqueries, IN.
-- ;;
CREATE TABLE customers (customer_id UInt32, name String, country LowCardinality(String), signup Date) ENGINE = MergeTree ORDER BY customer_id
-- ;;
INSERT INTO customers VALUES (1, 'Acme', 'DE', '2023-01-10'), (2, 'Globex', 'US', '2023-03-05'), (3, 'Initech', 'US', '2023-07-21'), (4, 'Umbrella', 'JP', '2024-01-02'), (5, 'Hooli', 'FR', '2024-02-14')
-- ;;
CREATE TABLE purchases (purchase_id UInt64, customer_id UInt32, at DateTime('UTC'), amount Decimal(12, 2)) ENGINE = MergeTree ORDER BY (customer_id, at)
-- ;;
INSERT INTO purchases SELECT number, 1 + number % 4, toDateTime('2024-01-01 00:00:00', 'UTC') + number * 5400, toDecimal64(10 + number % 50, 2) FROM numbers(400)
-- ;;
CREATE TABLE fx_rates (currency String, valid_from DateTime('UTC'), rate Float64) ENGINE = MergeTree ORDER BY (currency, valid_from)
-- ;;
INSERT INTO fx_rates VALUES ('EUR', '2024-01-01 00:00:00', 1.10), ('EUR', '2024-01-10 00:00:00', 1.08), ('EUR', '2024-01-20 00:00:00', 1.12)
-- ;;
CREATE TABLE customer_revenue (customer_id UInt32, name String, country String, revenue Decimal(38, 2), purchases UInt64) ENGINE = MergeTree ORDER BY customer_id
-- ;;
INSERT INTO customer_revenue SELECT c.customer_id, c.name, c.country, sum(p.amount), count() FROM customers AS c INNER JOIN purchases AS p ON c.customer_id = p.customer_id GROUP BY c.customer_id, c.name, c.country
-- ;;
INSERT INTO customer_revenue SELECT c.customer_id, c.name, c.country, 0, 0 FROM customers AS c LEFT JOIN purchases AS p ON c.customer_id = p.customer_id WHERE p.purchase_id = 0 AND p.customer_id = 0
-- ;;
CREATE TABLE purchases_eur (purchase_id UInt64, amount_eur Float64, rate Float64) ENGINE = MergeTree ORDER BY purchase_id
-- ;;
INSERT INTO purchases_eur SELECT p.purchase_id, toFloat64(p.amount) / r.rate, r.rate FROM (SELECT *, 'EUR' AS currency FROM purchases) AS p ASOF LEFT JOIN fx_rates AS r ON p.currency = r.currency AND p.at >= r.valid_from WHERE p.at < '2024-02-01 00:00:00'
-- ;;
CREATE TABLE buyers (customer_id UInt32) ENGINE = MergeTree ORDER BY customer_id
-- ;;
INSERT INTO buyers SELECT customer_id FROM customers LEFT SEMI JOIN purchases USING (customer_id)
-- ;;
CREATE TABLE never_bought (customer_id UInt32, name String) ENGINE = MergeTree ORDER BY customer_id
-- ;;
INSERT INTO never_bought SELECT customer_id, name FROM customers LEFT ANTI JOIN purchases USING (customer_id)
-- ;;
INSERT INTO never_bought SELECT customer_id, name FROM customers WHERE customer_id NOT IN (SELECT DISTINCT customer_id FROM purchases) AND country = 'FR'
-- ;;
CREATE TABLE last_purchase (customer_id UInt32, at DateTime('UTC'), amount Decimal(12, 2)) ENGINE = ReplacingMergeTree(at) ORDER BY customer_id
-- ;;
INSERT INTO last_purchase SELECT customer_id, argMax(at, at), argMax(amount, at) FROM purchases GROUP BY customer_id
-- ;;
INSERT INTO last_purchase SELECT p.customer_id, p.at, p.amount FROM purchases AS p ANY INNER JOIN customers AS c USING (customer_id) WHERE c.country = 'US' ORDER BY p.at DESC LIMIT 1 BY p.customer_id
-- ;;
CREATE TABLE country_pairs (a String, b String) ENGINE = MergeTree ORDER BY (a, b)
-- ;;
INSERT INTO country_pairs SELECT DISTINCT x.country, y.country FROM customers AS x CROSS JOIN customers AS y WHERE x.country < y.country
-- ;;
INSERT INTO customer_revenue SELECT customer_id, name, country, (SELECT max(amount) FROM purchases), 1 FROM customers WHERE customer_id = (SELECT min(customer_id) FROM customers)
-- ;;
ALTER TABLE customers UPDATE country = 'DE' WHERE customer_id IN (SELECT customer_id FROM never_bought)
-- ;;
ALTER TABLE purchases DELETE WHERE customer_id IN (SELECT customer_id FROM customers WHERE country = 'JP')
-- ;;
CREATE TABLE monthly (customer_id UInt32, month Date, spend Decimal(38, 2), share Float64) ENGINE = MergeTree ORDER BY (customer_id, month)
-- ;;
INSERT INTO monthly WITH totals AS (SELECT customer_id, sum(amount) AS total FROM purchases GROUP BY customer_id) SELECT p.customer_id, toStartOfMonth(p.at) AS month, sum(p.amount), toFloat64(sum(p.amount)) / any(t.total) FROM purchases AS p JOIN totals AS t USING (customer_id) GROUP BY p.customer_id, month
-- ;;
SELECT c.name, m.month, m.spend FROM monthly AS m JOIN customers AS c USING (customer_id) ORDER BY c.name, m.month LIMIT 10
-- ;;
INSERT INTO purchases (purchase_id, customer_id, at, amount) SELECT 10000 + customer_id, customer_id, '2024-06-01 00:00:00', 1 FROM customers FULL OUTER JOIN buyers USING (customer_id) WHERE customer_id > 0
