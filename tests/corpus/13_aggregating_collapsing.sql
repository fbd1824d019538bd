-- AggregatingMergeTree with -State/-Merge, SimpleAggregateFunction, Collapsing and VersionedCollapsing.
-- ;;
CREATE TABLE raw_requests (ts DateTime, endpoint String, user_id UInt64, latency_ms Float64) ENGINE = MergeTree ORDER BY (endpoint, ts)
-- ;;
INSERT INTO raw_requests SELECT toDateTime('2024-01-01 00:00:00') + number * 37, ['/a', '/b', '/c'][number % 3 + 1], number % 50, (number * 13) % 400 FROM numbers(2000)
-- ;;
CREATE TABLE endpoint_agg
(
    hour DateTime,
    endpoint String,
    requests AggregateFunction(count),
    users AggregateFunction(uniqExact, UInt64),
    p95 AggregateFunction(quantileExact(0.95), Float64),
    max_latency SimpleAggregateFunction(max, Float64),
    total_latency SimpleAggregateFunction(sum, Float64)
)
ENGINE = AggregatingMergeTree
ORDER BY (endpoint, hour)
-- ;;
INSERT INTO endpoint_agg SELECT toStartOfHour(ts), endpoint, countState(), uniqExactState(user_id), quantileExactState(0.95)(latency_ms), max(latency_ms), sum(latency_ms) FROM raw_requests GROUP BY toStartOfHour(ts), endpoint
-- ;;
INSERT INTO endpoint_agg SELECT toStartOfHour(ts), endpoint, countState(), uniqExactState(user_id), quantileExactState(0.95)(latency_ms), max(latency_ms), sum(latency_ms) FROM raw_requests WHERE endpoint = '/a' GROUP BY toStartOfHour(ts), endpoint
-- ;;
SELECT endpoint, countMerge(requests), uniqExactMerge(users), max(max_latency) FROM endpoint_agg GROUP BY endpoint ORDER BY endpoint
-- ;;
OPTIMIZE TABLE endpoint_agg FINAL
-- ;;
CREATE TABLE endpoint_report (endpoint String, requests UInt64, users UInt64, p95 Float64) ENGINE = MergeTree ORDER BY endpoint
-- ;;
INSERT INTO endpoint_report SELECT endpoint, countMerge(requests), uniqExactMerge(users), quantileExactMerge(0.95)(p95) FROM endpoint_agg GROUP BY endpoint
-- ;;
CREATE TABLE simple_agg (k String, mn SimpleAggregateFunction(min, Int64), mx SimpleAggregateFunction(max, Int64), anyv SimpleAggregateFunction(anyLast, String), arr SimpleAggregateFunction(groupUniqArrayArray, Array(UInt8))) ENGINE = AggregatingMergeTree ORDER BY k
-- ;;
INSERT INTO simple_agg VALUES ('a', 5, 5, 'x', [1, 2]), ('a', -1, 3, 'y', [2, 3]), ('b', 0, 0, 'z', [])
-- ;;
OPTIMIZE TABLE simple_agg FINAL
-- ;;
CREATE TABLE balances (account UInt32, amount Int64, sign Int8) ENGINE = CollapsingMergeTree(sign) ORDER BY account
-- ;;
INSERT INTO balances VALUES (1, 100, 1), (2, 50, 1)
-- ;;
INSERT INTO balances VALUES (1, 100, -1), (1, 120, 1)
-- ;;
INSERT INTO balances VALUES (2, 50, -1)
-- ;;
SELECT account, sum(amount * sign) FROM balances GROUP BY account HAVING sum(sign) > 0 ORDER BY account
-- ;;
OPTIMIZE TABLE balances FINAL
-- ;;
CREATE TABLE positions (instrument String, qty Int64, price Decimal(12, 4), sign Int8, version UInt32) ENGINE = VersionedCollapsingMergeTree(sign, version) ORDER BY instrument
-- ;;
INSERT INTO positions VALUES ('AAPL', 10, 190.1234, 1, 1), ('MSFT', 5, 410.0, 1, 1)
-- ;;
INSERT INTO positions VALUES ('AAPL', 10, 190.1234, -1, 1), ('AAPL', 15, 191.0, 1, 2)
-- ;;
OPTIMIZE TABLE positions FINAL
-- ;;
CREATE TABLE user_agg (user_id UInt64, first_seen SimpleAggregateFunction(min, DateTime), last_seen SimpleAggregateFunction(max, DateTime), endpoints AggregateFunction(groupUniqArray, String)) ENGINE = AggregatingMergeTree ORDER BY user_id
-- ;;
INSERT INTO user_agg SELECT user_id, min(ts), max(ts), groupUniqArrayState(endpoint) FROM raw_requests GROUP BY user_id
-- ;;
CREATE TABLE user_summary (user_id UInt64, first_seen DateTime, last_seen DateTime, endpoints Array(String)) ENGINE = MergeTree ORDER BY user_id
-- ;;
INSERT INTO user_summary SELECT user_id, min(first_seen), max(last_seen), arraySort(groupUniqArrayMerge(endpoints)) FROM user_agg GROUP BY user_id
-- ;;
CREATE TABLE graphite (Path String, Time DateTime, Value Float64, Version UInt32) ENGINE = ReplacingMergeTree(Version) ORDER BY (Path, Time)
-- ;;
INSERT INTO graphite VALUES ('cpu.load', '2024-01-01 00:00:00', 0.5, 1), ('cpu.load', '2024-01-01 00:00:00', 0.7, 2)
