-- CREATE TABLE variants: AS another table, AS SELECT, IF NOT EXISTS, OR REPLACE, engines with arguments, settings.
-- ;;
CREATE TABLE base_events (id UInt64, kind String, at DateTime('UTC'), payload String) ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY (kind, id)
-- ;;
INSERT INTO base_events SELECT number, ['a', 'b', 'c'][number % 3 + 1], toDateTime('2024-01-01 00:00:00', 'UTC') + number * 3600, repeat('p', number % 10) FROM numbers(200)
-- ;;
CREATE TABLE events_like AS base_events
-- ;;
CREATE TABLE events_mem AS base_events ENGINE = Memory
-- ;;
CREATE TABLE events_log AS base_events ENGINE = StripeLog
-- ;;
INSERT INTO events_mem SELECT * FROM base_events WHERE kind = 'a'
-- ;;
INSERT INTO events_log SELECT * FROM base_events WHERE id < 10
-- ;;
CREATE TABLE events_by_kind ENGINE = SummingMergeTree ORDER BY kind AS SELECT kind, count() AS n FROM base_events GROUP BY kind
-- ;;
CREATE TABLE events_populated ENGINE = MergeTree ORDER BY id AS SELECT id, kind FROM base_events WHERE id < 5
-- ;;
CREATE TABLE IF NOT EXISTS base_events (x UInt8) ENGINE = Memory
-- ;;
CREATE OR REPLACE TABLE events_like (id UInt64, note String) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO events_like VALUES (1, 'replaced schema')
-- ;;
CREATE TABLE settings_heavy (k UInt64, v String) ENGINE = MergeTree ORDER BY k SETTINGS index_granularity = 4096, min_rows_for_wide_part = 0, min_bytes_for_wide_part = 0, merge_max_block_size = 1024
-- ;;
INSERT INTO settings_heavy SELECT number, hex(number) FROM numbers(100)
-- ;;
CREATE TABLE compact_parts (k UInt64, v String) ENGINE = MergeTree ORDER BY k SETTINGS min_bytes_for_wide_part = '10G'
-- ;;
INSERT INTO compact_parts SELECT number, toString(number) FROM numbers(50)
-- ;;
CREATE TABLE sparse_cols (k UInt64, mostly_zero UInt64) ENGINE = MergeTree ORDER BY k SETTINGS ratio_of_defaults_for_sparse_serialization = 0.5
-- ;;
INSERT INTO sparse_cols SELECT number, if(number % 50 = 0, number, 0) FROM numbers(500)
-- ;;
CREATE TABLE merge_view_src1 (k UInt32, src String) ENGINE = MergeTree ORDER BY k
-- ;;
CREATE TABLE merge_view_src2 (k UInt32, src String) ENGINE = MergeTree ORDER BY k
-- ;;
INSERT INTO merge_view_src1 VALUES (1, 'one')
-- ;;
INSERT INTO merge_view_src2 VALUES (2, 'two')
-- ;;
CREATE TABLE merged_sources (k UInt32, src String) ENGINE = Merge(currentDatabase(), '^merge_view_src')
-- ;;
CREATE TABLE merged_union (k UInt32, src String) ENGINE = MergeTree ORDER BY k
-- ;;
INSERT INTO merged_union SELECT k, src FROM merge_view_src1 UNION ALL SELECT k, src FROM merge_view_src2
-- ;;
CREATE TABLE buffered (k UInt32, src String) ENGINE = Buffer(currentDatabase(), merged_union, 1, 10, 100, 10000, 1000000, 10000000, 100000000)
-- ;;
CREATE TABLE generated (k UInt32, s String) ENGINE = MergeTree ORDER BY k AS SELECT number, toString(number) FROM numbers(7)
-- ;;
CREATE TABLE with_pk_expr (d DateTime, user String, v UInt32) ENGINE = MergeTree ORDER BY (toStartOfDay(d), user) PRIMARY KEY toStartOfDay(d)
-- ;;
INSERT INTO with_pk_expr VALUES ('2024-01-01 10:00:00', 'u', 1), ('2024-01-02 11:00:00', 'v', 2)
