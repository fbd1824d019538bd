-- INSERT ... SELECT: numbers(), WITH/CTEs, window functions, arrayJoin, GROUP BY, ORDER BY LIMIT.
-- ;;
CREATE TABLE sales (sale_id UInt64, region LowCardinality(String), product String, day Date, qty UInt32, unit_price Decimal(10, 2)) ENGINE = MergeTree ORDER BY (region, day, sale_id)
-- ;;
INSERT INTO sales SELECT number, ['north', 'south', 'east', 'west'][number % 4 + 1], concat('prod-', toString(number % 11)), toDate('2024-01-01') + number % 60, 1 + number % 9, toDecimal64(5 + (number % 13) * 1.25, 2) FROM numbers(1500)
-- ;;
CREATE TABLE region_daily (region String, day Date, revenue Decimal(38, 2), orders UInt64) ENGINE = MergeTree ORDER BY (region, day)
-- ;;
INSERT INTO region_daily SELECT region, day, sum(qty * unit_price), count() FROM sales GROUP BY region, day
-- ;;
CREATE TABLE top_products (rank UInt8, product String, revenue Decimal(38, 2)) ENGINE = MergeTree ORDER BY rank
-- ;;
INSERT INTO top_products SELECT row_number() OVER (ORDER BY revenue DESC, product) AS rank, product, revenue FROM (SELECT product, sum(qty * unit_price) AS revenue FROM sales GROUP BY product) ORDER BY revenue DESC, product LIMIT 5
-- ;;
INSERT INTO region_daily WITH base AS (SELECT region, day, qty * unit_price AS amount FROM sales WHERE day >= '2024-02-15') SELECT concat(region, '-late'), day, sum(amount), count() FROM base GROUP BY region, day
-- ;;
CREATE TABLE running (region String, day Date, revenue Decimal(38, 2), cumulative Decimal(38, 2), moving_avg Float64, prev Decimal(38, 2)) ENGINE = MergeTree ORDER BY (region, day)
-- ;;
INSERT INTO running SELECT region, day, revenue, sum(revenue) OVER (PARTITION BY region ORDER BY day ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), avg(toFloat64(revenue)) OVER (PARTITION BY region ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW), lagInFrame(revenue, 1, 0) OVER (PARTITION BY region ORDER BY day ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM region_daily WHERE region NOT LIKE '%-late'
-- ;;
CREATE TABLE ranked (region String, product String, revenue Decimal(38, 2), rnk UInt64, dense UInt64, pct Float64) ENGINE = MergeTree ORDER BY (region, rnk)
-- ;;
INSERT INTO ranked SELECT region, product, rev, rank() OVER w, dense_rank() OVER w, percent_rank() OVER w FROM (SELECT region, product, sum(qty * unit_price) AS rev FROM sales GROUP BY region, product) WINDOW w AS (PARTITION BY region ORDER BY rev DESC, product)
-- ;;
CREATE TABLE calendar (d Date, dow UInt8, is_weekend Bool, week UInt32) ENGINE = MergeTree ORDER BY d
-- ;;
INSERT INTO calendar SELECT toDate('2024-01-01') + number AS d, toDayOfWeek(d), toDayOfWeek(d) >= 6, toISOWeek(d) FROM numbers(366)
-- ;;
INSERT INTO calendar SELECT d, 0, false, 0 FROM (SELECT arrayJoin([toDate('2025-01-01'), toDate('2025-01-02')]) AS d)
-- ;;
CREATE TABLE expanded (sale_id UInt64, unit UInt32) ENGINE = MergeTree ORDER BY (sale_id, unit)
-- ;;
INSERT INTO expanded SELECT sale_id, arrayJoin(range(qty)) FROM sales WHERE sale_id < 50
-- ;;
INSERT INTO expanded SELECT number, 0 FROM numbers(1000, 10) ORDER BY number DESC LIMIT 3
-- ;;
CREATE TABLE buckets (bucket UInt32, n UInt64, total UInt64) ENGINE = MergeTree ORDER BY bucket
-- ;;
INSERT INTO buckets SELECT intDiv(number, 100) AS bucket, count(), sum(number) FROM numbers(10000) GROUP BY bucket HAVING count() > 0 ORDER BY bucket
-- ;;
INSERT INTO buckets SELECT number, 0, 0 FROM system.numbers LIMIT 5
-- ;;
INSERT INTO buckets SELECT * FROM generateSeries(200, 210) AS g, (SELECT 1, 2) AS c
-- ;;
CREATE TABLE funnel (user_id UInt64, steps UInt8) ENGINE = MergeTree ORDER BY user_id
-- ;;
INSERT INTO funnel SELECT number % 40 AS user_id, windowFunnel(3600)(toDateTime('2024-01-01 00:00:00') + number * 60, number % 3 = 0, number % 3 = 1, number % 3 = 2) FROM numbers(400) GROUP BY user_id
-- ;;
INSERT INTO region_daily SELECT * FROM region_daily WHERE region = 'north' ORDER BY day LIMIT 3 OFFSET 1
-- ;;
INSERT INTO top_products (rank, product, revenue) SELECT 100 + rowNumberInAllBlocks(), product, 0 FROM (SELECT DISTINCT product FROM sales ORDER BY product LIMIT 2)
-- ;;
INSERT INTO ranked SELECT region, product, revenue, 0, 0, 0 FROM (SELECT region, product, sum(qty * unit_price) AS revenue FROM sales GROUP BY ALL) ORDER BY ALL LIMIT 2 BY region
-- ;;
INSERT INTO calendar SELECT d + 400, dow, is_weekend, week FROM calendar WHERE d IN (SELECT day FROM sales WHERE qty = 9) ORDER BY d LIMIT 10
