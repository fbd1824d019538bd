-- Projections and data-skipping indexes: declared in CREATE, added, materialized, dropped.
-- ;;
CREATE TABLE traces
(
    trace_id String,
    span_id UInt64,
    service LowCardinality(String),
    ts DateTime64(6, 'UTC'),
    duration_us UInt64,
    status_code UInt16,
    attrs Map(String, String),
    message String,
    INDEX idx_status status_code TYPE set(100) GRANULARITY 4,
    INDEX idx_duration duration_us TYPE minmax GRANULARITY 1,
    INDEX idx_msg message TYPE tokenbf_v1(4096, 3, 0) GRANULARITY 2,
    INDEX idx_trace trace_id TYPE bloom_filter(0.01) GRANULARITY 1,
    PROJECTION by_service (SELECT service, count(), max(duration_us) GROUP BY service)
)
ENGINE = MergeTree
ORDER BY (ts, span_id)
SETTINGS index_granularity = 256
-- ;;
INSERT INTO traces SELECT hex(intDiv(number, 8)), number, ['api', 'db', 'cache'][number % 3 + 1], addMilliseconds(toDateTime64('2024-01-01 00:00:00', 6, 'UTC'), number), (number * 7919) % 100000, [200, 200, 404, 500][number % 4 + 1], map('host', concat('h', toString(number % 5))), concat('span ', toString(number), if(number % 50 = 0, ' error timeout', ' ok')) FROM numbers(5000)
-- ;;
SELECT service, count() FROM traces GROUP BY service ORDER BY service
-- ;;
ALTER TABLE traces ADD INDEX idx_host attrs['host'] TYPE set(10) GRANULARITY 1
-- ;;
ALTER TABLE traces MATERIALIZE INDEX idx_host
-- ;;
ALTER TABLE traces ADD INDEX idx_keys mapKeys(attrs) TYPE bloom_filter GRANULARITY 1
-- ;;
ALTER TABLE traces ADD INDEX idx_ngram message TYPE ngrambf_v1(3, 1024, 2, 0) GRANULARITY 1
-- ;;
ALTER TABLE traces DROP INDEX idx_ngram
-- ;;
ALTER TABLE traces CLEAR INDEX idx_keys
-- ;;
ALTER TABLE traces ADD PROJECTION by_status (SELECT status_code, service, count() GROUP BY status_code, service)
-- ;;
ALTER TABLE traces MATERIALIZE PROJECTION by_status
-- ;;
ALTER TABLE traces ADD PROJECTION sorted_by_duration (SELECT * ORDER BY duration_us)
-- ;;
ALTER TABLE traces MATERIALIZE PROJECTION sorted_by_duration
-- ;;
ALTER TABLE traces DROP PROJECTION sorted_by_duration
-- ;;
INSERT INTO traces (trace_id, span_id, service, ts, duration_us, status_code, message) VALUES ('abc', 999999, 'api', '2024-02-01 00:00:00.000001', 5, 200, 'late span')
-- ;;
ALTER TABLE traces DELETE WHERE status_code = 404 AND service = 'cache'
-- ;;
ALTER TABLE traces UPDATE message = 'redacted' WHERE hasToken(message, 'timeout')
-- ;;
CREATE TABLE docs_fts (id UInt64, body String, INDEX inv body TYPE text(tokenizer = 'splitByNonAlpha') GRANULARITY 1) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO docs_fts VALUES (1, 'full text search in clickhouse'), (2, 'inverted index granules')
-- ;;
CREATE TABLE vec (id UInt64, emb Array(Float32), INDEX ann emb TYPE vector_similarity('hnsw', 'L2Distance', 3) GRANULARITY 1) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO vec VALUES (1, [0.1, 0.2, 0.3]), (2, [0.3, 0.2, 0.1]), (3, [1, 0, 0])
-- ;;
CREATE TABLE lookups (k UInt64, v String, PROJECTION by_v (SELECT * ORDER BY v)) ENGINE = MergeTree ORDER BY k SETTINGS deduplicate_merge_projection_mode = 'rebuild'
-- ;;
INSERT INTO lookups SELECT number, toString(cityHash64(number) % 1000) FROM numbers(1000)
-- ;;
ALTER TABLE lookups DELETE WHERE k % 100 = 0
-- ;;
OPTIMIZE TABLE lookups FINAL
-- ;;
SELECT count() FROM lookups WHERE v = '42'
-- ;;
ALTER TABLE traces MODIFY SETTING old_parts_lifetime = 60
-- ;;
ALTER TABLE traces ADD STATISTICS duration_us TYPE tdigest
