-- Column DEFAULT / MATERIALIZED / ALIAS / EPHEMERAL / CODEC / COMMENT, table COMMENT, and INSERTs that rely on them.
-- ;;
CREATE TABLE telemetry
(
    device_id UInt32 COMMENT 'device that sent the reading',
    ts DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    value Float64 CODEC(Gorilla, LZ4),
    counter UInt64 CODEC(Delta(8), LZ4HC(9)),
    raw String CODEC(ZSTD(6)),
    kind LowCardinality(String) DEFAULT 'gauge',
    day Date MATERIALIZED toDate(ts),
    hour UInt8 ALIAS toHour(ts),
    value_x100 Int64 DEFAULT toInt64(value * 100),
    label String DEFAULT concat('dev-', toString(device_id)) COMMENT 'derived label',
    flags UInt8 CODEC(T64, ZSTD),
    plain String CODEC(NONE)
)
ENGINE = MergeTree
ORDER BY (device_id, ts)
COMMENT 'readings from the fleet'
-- ;;
INSERT INTO telemetry (device_id, ts, value, counter, raw, flags, plain) VALUES (1, '2024-01-01 00:00:00', 21.5, 100, 'r1', 1, 'p')
-- ;;
INSERT INTO telemetry (device_id, ts, value, counter, raw, kind, flags, plain) VALUES (2, '2024-01-01 00:00:10', -4.25, 200, 'r2', 'counter', 0, '')
-- ;;
INSERT INTO telemetry (device_id, ts, value, counter, raw, kind, value_x100, label, flags, plain) VALUES (3, '2024-01-01 00:00:20', 1, 1, 'r3', DEFAULT, DEFAULT, 'custom', 2, 'x')
-- ;;
INSERT INTO telemetry (device_id, ts, value, counter, raw, flags, plain) SELECT number % 10, toDateTime('2024-01-02 00:00:00', 'UTC') + number * 15, sin(number), number * 3, repeat('a', number % 20), number % 8, '' FROM numbers(800)
-- ;;
ALTER TABLE telemetry ADD COLUMN week UInt32 MATERIALIZED toISOWeek(ts)
-- ;;
ALTER TABLE telemetry MATERIALIZE COLUMN week
-- ;;
ALTER TABLE telemetry MODIFY COLUMN raw String CODEC(LZ4)
-- ;;
ALTER TABLE telemetry MODIFY COLUMN kind LowCardinality(String) DEFAULT 'unknown'
-- ;;
ALTER TABLE telemetry MODIFY COLUMN value_x100 REMOVE DEFAULT
-- ;;
ALTER TABLE telemetry MODIFY COLUMN label REMOVE COMMENT
-- ;;
INSERT INTO telemetry (device_id, ts, value, counter, raw, value_x100, flags, plain) VALUES (4, '2024-01-03 00:00:00', 2, 2, 'r4', 200, 0, '')
-- ;;
CREATE TABLE with_ephemeral
(
    id UInt64,
    raw_json String EPHEMERAL '',
    name String DEFAULT JSONExtractString(raw_json, 'name'),
    age UInt8 DEFAULT JSONExtractUInt(raw_json, 'age')
)
ENGINE = MergeTree
ORDER BY id
-- ;;
INSERT INTO with_ephemeral (id, raw_json) VALUES (1, '{"name": "ann", "age": 31}'), (2, '{"name": "bob"}')
-- ;;
INSERT INTO with_ephemeral (id, name, age) VALUES (3, 'direct', 40)
-- ;;
CREATE TABLE hashed_ids
(
    email String,
    email_hash UInt64 MATERIALIZED cityHash64(lower(email)),
    domain String ALIAS splitByChar('@', email)[2],
    created Date DEFAULT '2024-01-01'
)
ENGINE = ReplacingMergeTree
ORDER BY email
-- ;;
INSERT INTO hashed_ids (email) VALUES ('A@Example.com'), ('b@example.org')
-- ;;
INSERT INTO hashed_ids VALUES ('c@example.net', '2024-05-05')
-- ;;
CREATE TABLE telemetry_summary (device_id UInt32, readings UInt64, avg_value Float64, first_day Date) ENGINE = MergeTree ORDER BY device_id
-- ;;
INSERT INTO telemetry_summary SELECT device_id, count(), round(avg(value), 9), min(day) FROM telemetry GROUP BY device_id
-- ;;
ALTER TABLE telemetry COMMENT COLUMN value 'the reading, in its own unit'
-- ;;
ALTER TABLE telemetry MODIFY COMMENT 'readings from the fleet (v2)'
-- ;;
CREATE TABLE seq_codecs (n UInt64 CODEC(Delta, ZSTD), f Float32 CODEC(FPC), d Decimal(10, 2) CODEC(ZSTD(22)), s String CODEC(LZ4HC)) ENGINE = MergeTree ORDER BY n
-- ;;
INSERT INTO seq_codecs SELECT number, number / 3, number * 1.25, toString(number) FROM numbers(100)
-- ;;
SELECT device_id, ts, kind, day, hour, value_x100, label FROM telemetry WHERE device_id < 4 ORDER BY device_id, ts LIMIT 5
-- ;;
ALTER TABLE telemetry DROP COLUMN week
