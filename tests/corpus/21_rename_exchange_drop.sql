-- RENAME TABLE, EXCHANGE TABLES, CREATE TABLE AS, DROP TABLE/VIEW/DICTIONARY, IF EXISTS forms.
-- ;;
CREATE TABLE staging_items (id UInt32, name String, qty UInt16) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO staging_items VALUES (1, 'bolt', 100), (2, 'nut', 250), (3, 'washer', 75)
-- ;;
CREATE TABLE items AS staging_items
-- ;;
INSERT INTO items SELECT * FROM staging_items WHERE qty > 80
-- ;;
CREATE TABLE items_v2 AS items ENGINE = ReplacingMergeTree ORDER BY id
-- ;;
INSERT INTO items_v2 SELECT id, name, qty + 1 FROM items
-- ;;
EXCHANGE TABLES items AND items_v2
-- ;;
RENAME TABLE items_v2 TO items_old
-- ;;
RENAME TABLE staging_items TO items_staging, items_old TO items_previous
-- ;;
CREATE TABLE IF NOT EXISTS items (id UInt32) ENGINE = Memory
-- ;;
CREATE TABLE items_copy ENGINE = MergeTree ORDER BY id AS SELECT * FROM items
-- ;;
CREATE TABLE items_empty ENGINE = MergeTree ORDER BY id EMPTY AS SELECT * FROM items
-- ;;
CREATE TABLE items_summary ENGINE = MergeTree ORDER BY name AS SELECT name, sum(qty) AS total FROM items_staging GROUP BY name
-- ;;
CREATE VIEW items_view AS SELECT id, name FROM items WHERE qty > 0
-- ;;
CREATE DICTIONARY items_dict (id UInt64, name String) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 'items')) LIFETIME(0) LAYOUT(HASHED())
-- ;;
DROP DICTIONARY items_dict
-- ;;
DROP VIEW items_view
-- ;;
DROP TABLE items_empty
-- ;;
DROP TABLE IF EXISTS no_such_table
-- ;;
DROP TABLE IF EXISTS items_copy SYNC
-- ;;
CREATE OR REPLACE TABLE items_summary (name String, total UInt64) ENGINE = MergeTree ORDER BY name
-- ;;
INSERT INTO items_summary VALUES ('rebuilt', 1)
-- ;;
REPLACE TABLE items_previous ENGINE = MergeTree ORDER BY id AS SELECT id, name, qty * 2 AS qty FROM items_staging
-- ;;
RENAME items_summary TO summary
-- ;;
CREATE TABLE `weird name-with dash` (`select` String, `from` UInt8, `col with space` Int32) ENGINE = MergeTree ORDER BY tuple()
-- ;;
INSERT INTO `weird name-with dash` VALUES ('keyword', 1, -1)
-- ;;
CREATE TABLE "double_quoted" ("Col" String) ENGINE = Log
-- ;;
INSERT INTO "double_quoted" VALUES ('dq')
-- ;;
RENAME TABLE `weird name-with dash` TO weird_renamed
-- ;;
DROP TABLE double_quoted
-- ;;
CREATE TEMPORARY TABLE temp_calc (x UInt32) ENGINE = Memory
-- ;;
EXISTS TABLE items
-- ;;
SHOW TABLES
-- ;;
DETACH TABLE items_previous
-- ;;
ATTACH TABLE items_previous
-- ;;
DROP TABLE items_staging, items_previous
