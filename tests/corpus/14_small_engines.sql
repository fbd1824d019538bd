-- The non-MergeTree engines: Memory, Log, TinyLog, StripeLog, Set, Join, Null, EmbeddedRocksDB.
-- ;;
CREATE TABLE scratch (k UInt32, v String) ENGINE = Memory
-- ;;
INSERT INTO scratch VALUES (1, 'one'), (2, 'two'), (3, 'three')
-- ;;
CREATE TABLE capped (k UInt32) ENGINE = Memory SETTINGS max_rows_to_keep = 100, min_rows_to_keep = 50
-- ;;
INSERT INTO capped SELECT number FROM numbers(30)
-- ;;
CREATE TABLE audit_log (ts DateTime, actor String, action String) ENGINE = Log
-- ;;
INSERT INTO audit_log VALUES ('2024-01-01 00:00:00', 'ann', 'login'), ('2024-01-01 00:01:00', 'ann', 'logout')
-- ;;
INSERT INTO audit_log SELECT toDateTime('2024-01-02 00:00:00') + number, concat('bot', toString(number % 3)), 'ping' FROM numbers(10)
-- ;;
CREATE TABLE tiny (id UInt8, name String) ENGINE = TinyLog
-- ;;
INSERT INTO tiny VALUES (1, 'a'), (2, 'b')
-- ;;
CREATE TABLE stripes (id UInt32, payload String) ENGINE = StripeLog
-- ;;
INSERT INTO stripes SELECT number, repeat('z', number % 7) FROM numbers(25)
-- ;;
CREATE TABLE blocked_ids (id UInt32) ENGINE = Set
-- ;;
INSERT INTO blocked_ids VALUES (2), (3)
-- ;;
CREATE TABLE allowed (id UInt32, who String) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO allowed SELECT k, v FROM scratch WHERE k NOT IN blocked_ids
-- ;;
CREATE TABLE user_names (id UInt32, name String) ENGINE = Join(ANY, LEFT, id)
-- ;;
INSERT INTO user_names VALUES (1, 'ann'), (2, 'bob'), (3, 'cat')
-- ;;
CREATE TABLE enriched (id UInt32, name String) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO enriched SELECT k, joinGet('user_names', 'name', k) FROM scratch
-- ;;
CREATE TABLE sink (a UInt32, b String) ENGINE = Null
-- ;;
INSERT INTO sink VALUES (1, 'dropped on the floor')
-- ;;
CREATE TABLE kv (key String, value String, updated UInt64) ENGINE = EmbeddedRocksDB PRIMARY KEY key
-- ;;
INSERT INTO kv VALUES ('a', '1', 1), ('b', '2', 1)
-- ;;
INSERT INTO kv VALUES ('a', 'overwritten', 2)
-- ;;
INSERT INTO kv SELECT concat('k', toString(number)), toString(number * number), 3 FROM numbers(20)
-- ;;
DELETE FROM kv WHERE key = 'b'
-- ;;
ALTER TABLE kv UPDATE value = 'bumped' WHERE key = 'k1'
-- ;;
TRUNCATE TABLE scratch
-- ;;
INSERT INTO scratch VALUES (10, 'after truncate')
-- ;;
CREATE TABLE join_all (k UInt32, tag String) ENGINE = Join(ALL, INNER, k)
-- ;;
INSERT INTO join_all VALUES (1, 'x'), (1, 'y'), (2, 'z')
-- ;;
SELECT s.id, j.tag FROM allowed AS s ALL INNER JOIN join_all AS j ON s.id = j.k ORDER BY s.id, j.tag
-- ;;
INSERT INTO audit_log (ts, actor, action) SELECT ts, actor, 'replayed' FROM audit_log WHERE action = 'login'
