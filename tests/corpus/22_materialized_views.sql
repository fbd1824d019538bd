-- Materialized views: TO a target table, with an inner engine, POPULATE, chained, dropped.
-- ;;
CREATE TABLE clicks (ts DateTime('UTC'), user_id UInt64, page String, ms UInt32) ENGINE = MergeTree ORDER BY ts
-- ;;
CREATE TABLE clicks_per_page (page String, clicks UInt64, total_ms UInt64) ENGINE = SummingMergeTree ORDER BY page
-- ;;
CREATE MATERIALIZED VIEW clicks_per_page_mv TO clicks_per_page AS SELECT page, count() AS clicks, sum(ms) AS total_ms FROM clicks GROUP BY page
-- ;;
INSERT INTO clicks VALUES ('2024-01-01 00:00:00', 1, '/', 120), ('2024-01-01 00:00:01', 2, '/docs', 300)
-- ;;
INSERT INTO clicks SELECT toDateTime('2024-01-01 01:00:00', 'UTC') + number, number % 20, ['/', '/docs', '/blog', '/pricing'][number % 4 + 1], number % 1000 FROM numbers(500)
-- ;;
CREATE MATERIALIZED VIEW clicks_hourly ENGINE = AggregatingMergeTree ORDER BY (hour, page) AS SELECT toStartOfHour(ts) AS hour, page, countState() AS n, uniqState(user_id) AS users FROM clicks GROUP BY hour, page
-- ;;
INSERT INTO clicks SELECT toDateTime('2024-01-02 00:00:00', 'UTC') + number * 60, number % 7, '/blog', 50 FROM numbers(100)
-- ;;
CREATE MATERIALIZED VIEW slow_clicks ENGINE = MergeTree ORDER BY ts POPULATE AS SELECT ts, user_id, page, ms FROM clicks WHERE ms > 900
-- ;;
CREATE TABLE user_first_click (user_id UInt64, first_ts SimpleAggregateFunction(min, DateTime('UTC'))) ENGINE = AggregatingMergeTree ORDER BY user_id
-- ;;
CREATE MATERIALIZED VIEW user_first_click_mv TO user_first_click (user_id UInt64, first_ts DateTime('UTC')) AS SELECT user_id, min(ts) AS first_ts FROM clicks GROUP BY user_id
-- ;;
INSERT INTO clicks VALUES ('2023-12-31 23:59:59', 1, '/early', 1), ('2024-02-01 00:00:00', 99, '/new', 10)
-- ;;
CREATE TABLE page_alerts (page String, clicks UInt64, noted_at DateTime('UTC')) ENGINE = MergeTree ORDER BY page
-- ;;
CREATE MATERIALIZED VIEW page_alerts_mv TO page_alerts AS SELECT page, clicks, toDateTime('2024-01-01 00:00:00', 'UTC') AS noted_at FROM clicks_per_page WHERE clicks > 100
-- ;;
INSERT INTO clicks SELECT toDateTime('2024-03-01 00:00:00', 'UTC') + number, 5, '/hot', 1 FROM numbers(150)
-- ;;
SELECT page, sum(clicks), sum(total_ms) FROM clicks_per_page GROUP BY page ORDER BY page
-- ;;
SELECT hour, page, countMerge(n), uniqMerge(users) FROM clicks_hourly GROUP BY hour, page ORDER BY hour, page LIMIT 5
-- ;;
OPTIMIZE TABLE clicks_per_page FINAL
-- ;;
ALTER TABLE clicks_per_page_mv MODIFY QUERY SELECT page, count() AS clicks, sum(ms) * 2 AS total_ms FROM clicks GROUP BY page
-- ;;
INSERT INTO clicks VALUES ('2024-04-01 00:00:00', 3, '/after-modify', 10)
-- ;;
DETACH TABLE page_alerts_mv
-- ;;
ATTACH TABLE page_alerts_mv
-- ;;
DROP VIEW page_alerts_mv
-- ;;
INSERT INTO clicks VALUES ('2024-05-01 00:00:00', 4, '/hot', 1)
-- ;;
CREATE MATERIALIZED VIEW IF NOT EXISTS clicks_hourly ENGINE = Memory AS SELECT 1 AS x FROM clicks
-- ;;
DROP TABLE clicks_hourly
-- ;;
ALTER TABLE clicks DELETE WHERE page = '/early'
-- ;;
CREATE MATERIALIZED VIEW json_sink ENGINE = MergeTree ORDER BY id AS SELECT cityHash64(page, ts) AS id, toJSONString(map('page', page)) AS doc FROM clicks
-- ;;
INSERT INTO clicks VALUES ('2024-06-01 00:00:00', 6, '/json', 5)
