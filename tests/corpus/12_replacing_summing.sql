-- ReplacingMergeTree (version, is_deleted) and SummingMergeTree, read with FINAL.
-- ;;
CREATE TABLE users
(
    user_id UInt64,
    email String,
    plan LowCardinality(String),
    updated_at DateTime64(3, 'UTC'),
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY user_id
-- ;;
INSERT INTO users VALUES (1, 'a@example.com', 'free', '2024-01-01 00:00:00.000', 1), (2, 'b@example.com', 'pro', '2024-01-01 00:00:00.000', 1)
-- ;;
INSERT INTO users VALUES (1, 'a@example.org', 'pro', '2024-02-01 00:00:00.000', 2)
-- ;;
INSERT INTO users VALUES (1, 'stale@example.com', 'free', '2023-12-01 00:00:00.000', 0)
-- ;;
INSERT INTO users SELECT number + 10, concat('u', toString(number), '@example.com'), ['free', 'pro', 'team'][number % 3 + 1], toDateTime64('2024-03-01 00:00:00', 3, 'UTC') + number, 1 FROM numbers(50)
-- ;;
INSERT INTO users SELECT number + 10, concat('u', toString(number), '@example.net'), 'team', toDateTime64('2024-04-01 00:00:00', 3, 'UTC'), 2 FROM numbers(10)
-- ;;
SELECT user_id, email, plan FROM users FINAL WHERE user_id < 15 ORDER BY user_id
-- ;;
OPTIMIZE TABLE users FINAL
-- ;;
CREATE TABLE kv_state (key String, value String, ver UInt32, is_deleted UInt8) ENGINE = ReplacingMergeTree(ver, is_deleted) ORDER BY key
-- ;;
INSERT INTO kv_state VALUES ('a', '1', 1, 0), ('b', '2', 1, 0), ('c', '3', 1, 0)
-- ;;
INSERT INTO kv_state VALUES ('b', '', 2, 1)
-- ;;
INSERT INTO kv_state VALUES ('a', '10', 3, 0)
-- ;;
OPTIMIZE TABLE kv_state FINAL
-- ;;
CREATE TABLE replace_no_ver (k UInt32, v String) ENGINE = ReplacingMergeTree ORDER BY k
-- ;;
INSERT INTO replace_no_ver VALUES (1, 'first'), (1, 'second'), (2, 'only')
-- ;;
CREATE TABLE page_views_daily (day Date, page String, views UInt64, bytes UInt64, avg_ms Float64) ENGINE = SummingMergeTree((views, bytes)) ORDER BY (day, page)
-- ;;
INSERT INTO page_views_daily VALUES ('2024-01-01', '/', 10, 1000, 12.5), ('2024-01-01', '/', 5, 500, 20.0), ('2024-01-01', '/about', 1, 10, 3.0)
-- ;;
INSERT INTO page_views_daily SELECT toDate('2024-01-01') + number % 3, ['/', '/about', '/pricing'][number % 3 + 1], 1, number * 10, 1.0 FROM numbers(300)
-- ;;
OPTIMIZE TABLE page_views_daily FINAL
-- ;;
SELECT day, page, sum(views), sum(bytes) FROM page_views_daily GROUP BY day, page ORDER BY day, page
-- ;;
CREATE TABLE metric_sums (metric String, ts Date, value Int64, per_host Map(String, UInt64)) ENGINE = SummingMergeTree ORDER BY (metric, ts)
-- ;;
INSERT INTO metric_sums VALUES ('cpu', '2024-01-01', 5, {'h1': 1}), ('cpu', '2024-01-01', -2, {'h1': 2, 'h2': 3}), ('mem', '2024-01-01', 0, {})
-- ;;
INSERT INTO metric_sums SELECT ['cpu', 'mem', 'disk'][number % 3 + 1], toDate('2024-01-01') + intDiv(number, 30), number, map(concat('h', toString(number % 4)), 1) FROM numbers(90)
-- ;;
OPTIMIZE TABLE metric_sums FINAL
-- ;;
ALTER TABLE users UPDATE plan = 'enterprise' WHERE user_id IN (SELECT user_id FROM users FINAL WHERE plan = 'team' AND user_id > 50)
-- ;;
ALTER TABLE users DELETE WHERE email LIKE '%@example.net'
-- ;;
DELETE FROM users WHERE user_id = 2
-- ;;
ALTER TABLE page_views_daily ADD COLUMN sessions UInt64 DEFAULT 0
-- ;;
INSERT INTO page_views_daily (day, page, views, bytes, avg_ms, sessions) VALUES ('2024-01-02', '/about', 1, 1, 1, 1)
