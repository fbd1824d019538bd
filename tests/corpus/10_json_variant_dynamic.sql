-- The newer semi-structured types: JSON, Variant, Dynamic (all GA in recent engines).
-- ;;
CREATE TABLE logs (id UInt64, payload JSON) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO logs VALUES (1, '{"level": "info", "msg": "started", "ctx": {"pid": 42}}')
-- ;;
INSERT INTO logs VALUES (2, '{"level": "error", "msg": "it''s broken", "ctx": {"pid": 43, "code": 500}, "tags": ["a", "b"]}'), (3, '{}')
-- ;;
INSERT INTO logs SELECT 10 + number, toJSONString(map('level', if(number % 2, 'warn', 'debug'), 'n', toString(number))) FROM numbers(20)
-- ;;
CREATE TABLE typed_logs (id UInt64, payload JSON(level String, ctx.pid UInt32, SKIP secret)) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO typed_logs VALUES (1, '{"level": "info", "ctx": {"pid": 7}, "secret": "x"}'), (2, '{"level": "warn", "extra": [1, 2, 3]}')
-- ;;
INSERT INTO typed_logs SELECT id, payload FROM logs WHERE id < 5
-- ;;
CREATE TABLE json_levels (level String, n UInt64) ENGINE = MergeTree ORDER BY level
-- ;;
INSERT INTO json_levels SELECT toString(payload.level), count() FROM logs GROUP BY 1
-- ;;
CREATE TABLE variants (id UInt32, v Variant(UInt64, String, Array(UInt64))) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO variants VALUES (1, 42), (2, 'text'), (3, [1, 2, 3]), (4, NULL)
-- ;;
INSERT INTO variants SELECT number + 10, multiIf(number % 3 = 0, number::Variant(UInt64, String, Array(UInt64)), number % 3 = 1, toString(number)::Variant(UInt64, String, Array(UInt64)), range(number)::Variant(UInt64, String, Array(UInt64))) FROM numbers(12)
-- ;;
ALTER TABLE variants UPDATE v = 'replaced' WHERE variantType(v) = 'Array(UInt64)'
-- ;;
CREATE TABLE dyn (id UInt32, d Dynamic) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO dyn VALUES (1, 1), (2, 'two'), (3, 3.5), (4, [4, 4]), (5, NULL), (6, '2024-01-01'::Date)
-- ;;
INSERT INTO dyn SELECT number + 100, if(number % 2, number::Dynamic, concat('n', toString(number))::Dynamic) FROM numbers(10)
-- ;;
CREATE TABLE dyn_types (t String, c UInt64) ENGINE = MergeTree ORDER BY t
-- ;;
INSERT INTO dyn_types SELECT dynamicType(d), count() FROM dyn GROUP BY 1
-- ;;
ALTER TABLE logs ADD COLUMN level LowCardinality(String) MATERIALIZED toString(payload.level)
-- ;;
ALTER TABLE logs DELETE WHERE toString(payload.level) = 'debug'
-- ;;
INSERT INTO logs FORMAT JSONEachRow
{"id": 100, "payload": {"level": "info", "msg": "from json each row"}}
{"id": 101, "payload": {"level": "trace", "nested": {"deep": {"x": 1}}}}
-- ;;
SELECT id, payload.level, payload.ctx.pid FROM logs ORDER BY id LIMIT 5
-- ;;
SELECT id, v, variantType(v) FROM variants ORDER BY id LIMIT 5
-- ;;
CREATE TABLE dyn_limited (id UInt32, d Dynamic(max_types = 4)) ENGINE = Memory
-- ;;
INSERT INTO dyn_limited SELECT id, d FROM dyn
