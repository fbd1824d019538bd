-- INSERT with inline data in JSONEachRow, JSONCompactEachRow and their variants.
-- ;;
CREATE TABLE api_events (id UInt64, kind LowCardinality(String), user String, props Map(String, String), at DateTime64(3, 'UTC'), amount Nullable(Decimal(10, 2))) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO api_events FORMAT JSONEachRow
{"id": 1, "kind": "signup", "user": "ann", "props": {"plan": "free"}, "at": "2024-01-01 00:00:00.000", "amount": null}
{"id": 2, "kind": "purchase", "user": "ann", "props": {"sku": "A-1"}, "at": "2024-01-02 10:00:00.250", "amount": 19.99}
-- ;;
INSERT INTO api_events FORMAT JSONEachRow {"id": 3, "kind": "refund", "user": "bob", "props": {}, "at": "2024-01-03 00:00:00", "amount": -5.00}
-- ;;
INSERT INTO api_events FORMAT JSONEachRow
[{"id": 4, "kind": "login", "user": "cat", "props": {"ua": "curl/8"}, "at": "2024-01-04 00:00:00", "amount": null}, {"id": 5, "kind": "login", "user": "dee", "props": {}, "at": "2024-01-04 00:00:01", "amount": null}]
-- ;;
INSERT INTO api_events (id, kind, user) FORMAT JSONEachRow
{"id": 6, "kind": "ping", "user": "it's me"}
{"id": 7, "user": "no kind", "kind": ""}
-- ;;
INSERT INTO api_events FORMAT JSONCompactEachRow
[8, "signup", "eve", {"plan": "pro"}, "2024-02-01 00:00:00", null]
[9, "purchase", "eve", {"sku": "B-2", "coupon": "X"}, "2024-02-01 00:05:00", 99.5]
-- ;;
INSERT INTO api_events FORMAT JSONCompactEachRowWithNames
["id", "kind", "user", "props", "at", "amount"]
[10, "logout", "eve", {}, "2024-02-01 01:00:00", null]
-- ;;
INSERT INTO api_events FORMAT JSONStringsEachRow
{"id": "11", "kind": "strings", "user": "finn", "props": "{'k':'v'}", "at": "2024-03-01 00:00:00", "amount": "1.50"}
-- ;;
INSERT INTO api_events FORMAT JSON
{"data": [{"id": 12, "kind": "json", "user": "gus", "props": {}, "at": "2024-03-02 00:00:00", "amount": 0}]}
-- ;;
INSERT INTO api_events FORMAT JSONCompact
{"meta": [{"name": "id", "type": "UInt64"}, {"name": "kind", "type": "LowCardinality(String)"}, {"name": "user", "type": "String"}, {"name": "props", "type": "Map(String, String)"}, {"name": "at", "type": "DateTime64(3, 'UTC')"}, {"name": "amount", "type": "Nullable(Decimal(10, 2))"}], "data": [[13, "compact", "hal", {}, "2024-03-03 00:00:00", 3.25]]}
-- ;;
INSERT INTO api_events SETTINGS input_format_skip_unknown_fields = 1 FORMAT JSONEachRow
{"id": 14, "kind": "extra", "user": "ivy", "props": {}, "at": "2024-03-04 00:00:00", "amount": null, "unknown_field": true}
-- ;;
INSERT INTO api_events FORMAT JSONEachRow
{"id": 15, "kind": "escapes", "user": "quote \" backslash \\ newline \n tab \t unicode \u00e9", "props": {"semi": ";", "dash": "-- x"}, "at": "2024-03-05 00:00:00", "amount": null}
-- ;;
CREATE TABLE kinds (kind String, n UInt64, users Array(String)) ENGINE = MergeTree ORDER BY kind
-- ;;
INSERT INTO kinds SELECT kind, count(), arraySort(groupUniqArray(user)) FROM api_events GROUP BY kind
-- ;;
CREATE TABLE nested_json (id UInt32, tags Array(String), point Tuple(x Float64, y Float64), attrs Map(String, UInt32)) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO nested_json FORMAT JSONEachRow
{"id": 1, "tags": ["a", "b"], "point": {"x": 1.5, "y": -2}, "attrs": {"n": 1}}
{"id": 2, "tags": [], "point": {"x": 0, "y": 0}, "attrs": {}}
-- ;;
INSERT INTO nested_json FORMAT JSONCompactEachRow
[3, ["c"], {"x": 3.5, "y": 4.5}, {"m": 2}]
-- ;;
INSERT INTO nested_json FORMAT JSONObjectEachRow
{"row_1": {"id": 4, "tags": ["obj"], "point": {"x": 1, "y": 1}, "attrs": {}}}
-- ;;
ALTER TABLE api_events UPDATE props = mapUpdate(props, map('migrated', '1')) WHERE kind = 'signup'
-- ;;
ALTER TABLE api_events DELETE WHERE kind = 'ping'
-- ;;
INSERT INTO api_events FORMAT JSONEachRow
{"id": 16, "kind": "large", "user": "big", "props": {"a": "1", "b": "2", "c": "3", "d": "4"}, "at": 1709251200123, "amount": 12345678.9}
-- ;;
INSERT INTO api_events FORMAT JSONLines
{"id": 17, "kind": "jsonlines", "user": "alias", "props": {}, "at": "2024-03-06 00:00:00", "amount": null}
-- ;;
INSERT INTO api_events FORMAT NDJSON
{"id": 18, "kind": "ndjson", "user": "alias2", "props": {}, "at": "2024-03-07 00:00:00", "amount": null}
-- ;;
SELECT kind, n, users FROM kinds ORDER BY kind
