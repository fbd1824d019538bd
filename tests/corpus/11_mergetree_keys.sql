-- MergeTree with ORDER BY, PARTITION BY, PRIMARY KEY, SAMPLE BY, TTL and table SETTINGS.
-- ;;
CREATE TABLE hits
(
    site_id UInt32,
    user_id UInt64,
    event_date Date,
    event_time DateTime('UTC'),
    url String,
    duration_ms UInt32
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(event_date)
PRIMARY KEY (site_id, event_date, intHash32(user_id))
ORDER BY (site_id, event_date, intHash32(user_id), event_time)
SAMPLE BY intHash32(user_id)
SETTINGS index_granularity = 1024
-- ;;
INSERT INTO hits SELECT number % 5, number, toDate('2024-01-01') + (number % 90), toDateTime('2024-01-01 00:00:00', 'UTC') + number * 977, concat('/page/', toString(number % 17)), (number * 37) % 5000 FROM numbers(3000)
-- ;;
INSERT INTO hits VALUES (9, 1, '2024-05-01', '2024-05-01 10:00:00', '/late', 12)
-- ;;
SELECT site_id, count() FROM hits SAMPLE 0.5 GROUP BY site_id ORDER BY site_id
-- ;;
ALTER TABLE hits DROP PARTITION 202401
-- ;;
ALTER TABLE hits DETACH PARTITION 202402
-- ;;
ALTER TABLE hits ATTACH PARTITION 202402
-- ;;
ALTER TABLE hits DELETE WHERE duration_ms > 4900
-- ;;
CREATE TABLE hits_ttl
(
    event_time DateTime,
    level String,
    message String TTL event_time + INTERVAL 1 DAY
)
ENGINE = MergeTree
ORDER BY event_time
TTL event_time + INTERVAL 1 YEAR DELETE
-- ;;
INSERT INTO hits_ttl VALUES ('2020-01-01 00:00:00', 'info', 'old enough to expire'), ('2099-01-01 00:00:00', 'info', 'far future')
-- ;;
INSERT INTO hits_ttl VALUES ('2098-06-01 00:00:00', 'debug', 'kept')
-- ;;
OPTIMIZE TABLE hits_ttl FINAL
-- ;;
CREATE TABLE hits_ttl_where (d Date, kind String, v UInt32) ENGINE = MergeTree ORDER BY d TTL d + INTERVAL 30 DAY DELETE WHERE kind = 'temp'
-- ;;
INSERT INTO hits_ttl_where VALUES ('2000-01-01', 'temp', 1), ('2000-01-01', 'keep', 2), ('2099-01-01', 'temp', 3)
-- ;;
CREATE TABLE no_key (msg String, n UInt32) ENGINE = MergeTree ORDER BY tuple()
-- ;;
INSERT INTO no_key VALUES ('unordered', 3), ('rows', 1), ('stay', 2)
-- ;;
CREATE TABLE compound (a String, b Int32, c Float64) ENGINE = MergeTree PRIMARY KEY a ORDER BY (a, b) SETTINGS min_bytes_for_wide_part = 0
-- ;;
INSERT INTO compound SELECT toString(number % 10), number, number / 3 FROM numbers(200)
-- ;;
ALTER TABLE compound MODIFY SETTING merge_with_ttl_timeout = 3600
-- ;;
ALTER TABLE compound ADD COLUMN d UInt8, MODIFY ORDER BY (a, b, d)
-- ;;
INSERT INTO compound VALUES ('x', 1, 1.0, 2)
-- ;;
ALTER TABLE hits_ttl MODIFY TTL event_time + INTERVAL 2 YEAR
-- ;;
ALTER TABLE hits_ttl REMOVE TTL
-- ;;
CREATE TABLE by_expr (ts DateTime, k String, v UInt64) ENGINE = MergeTree PARTITION BY (toYear(ts), k) ORDER BY (k, ts)
-- ;;
INSERT INTO by_expr SELECT toDateTime('2023-06-01 00:00:00') + number * 86400 * 20, ['a', 'b'][number % 2 + 1], number FROM numbers(40)
-- ;;
ALTER TABLE by_expr DROP PARTITION (2023, 'a')
-- ;;
OPTIMIZE TABLE by_expr PARTITION (2024, 'b') FINAL
-- ;;
CREATE TABLE nullable_key (k Nullable(String), v UInt8) ENGINE = MergeTree ORDER BY k SETTINGS allow_nullable_key = 1
-- ;;
INSERT INTO nullable_key VALUES (NULL, 1), ('a', 2)
-- ;;
OPTIMIZE TABLE hits DEDUPLICATE
