-- Statements that must be refused whatever path they take: they read or write outside the object,
-- touch engine-global state, or could not replay the same. The harness runs each one on a fresh
-- object that holds a table `t (a UInt64, s String)` and asserts it is refused.
-- ;;
SELECT * FROM merge('.*', '.*')
-- ;;
INSERT INTO t SELECT 1, toString(count()) FROM merge(REGEXP('.*'), '.*')
-- ;;
INSERT INTO t SELECT 1, * FROM file('/etc/hostname', 'LineAsString')
-- ;;
SELECT * FROM file('/etc/passwd', 'LineAsString')
-- ;;
INSERT INTO t SELECT 1, file('/etc/hostname')
-- ;;
INSERT INTO t VALUES (1, file('/etc/hostname'))
-- ;;
INSERT INTO t FORMAT Values (1, file('/etc/hostname'))
-- ;;
INSERT INTO t FORMAT values (1, file('/etc/hostname'))
-- ;;
INSERT INTO t FORMAT VALUES (1, file('/etc/hostname'))
-- ;;
INSERT INTO t format vAlUeS (1, file('/etc/hostname'))
-- ;;
INSERT INTO t SELECT 1, * FROM url('http://127.0.0.1:9/x', 'LineAsString')
-- ;;
INSERT INTO t SELECT 1, * FROM s3('http://127.0.0.1:9/bucket/key', 'LineAsString')
-- ;;
INSERT INTO t SELECT 1, * FROM remote('127.0.0.1:9000', 'system', 'one')
-- ;;
INSERT INTO t SELECT 1, toString(getServerSetting('max_server_memory_usage'))
-- ;;
SELECT getServerSetting('path')
-- ;;
INSERT INTO t SELECT 1, query FROM system.processes
-- ;;
SELECT query FROM system.query_log
-- ;;
INSERT INTO t SELECT 1, name FROM system.databases
-- ;;
SELECT query FROM system.processes
-- ;;
INSERT INTO t SELECT 1, name FROM system.tables WHERE database != currentDatabase()
-- ;;
CREATE FUNCTION corpus_evil AS (x) -> x + 1
-- ;;
DROP FUNCTION IF EXISTS corpus_evil
-- ;;
KILL QUERY WHERE 1
-- ;;
SET max_execution_time = 1000000
-- ;;
SET readonly = 0
-- ;;
SYSTEM DROP DNS CACHE
-- ;;
SYSTEM RELOAD DICTIONARIES
-- ;;
SYSTEM SHUTDOWN
-- ;;
CREATE MATERIALIZED VIEW refreshing REFRESH EVERY 1 SECOND ENGINE = MergeTree ORDER BY a AS SELECT number AS a FROM numbers(10)
-- ;;
CREATE MATERIALIZED VIEW refreshing_to REFRESH AFTER 1 MINUTE TO t AS SELECT 1 AS a, 'x' AS s
-- ;;
CREATE DATABASE corpus_other
-- ;;
DROP DATABASE default
-- ;;
CREATE TABLE outside (a UInt8) ENGINE = File(TSV, '/tmp/corpus-outside.tsv')
-- ;;
CREATE TABLE outside_url (a String) ENGINE = URL('http://127.0.0.1:9/x', 'LineAsString')
-- ;;
CREATE DICTIONARY outside_dict (a UInt64, s String) PRIMARY KEY a SOURCE(FILE(PATH '/etc/passwd' FORMAT 'TSV')) LIFETIME(0) LAYOUT(FLAT())
-- ;;
CREATE DICTIONARY cross_db_dict (name String, engine String) PRIMARY KEY name SOURCE(CLICKHOUSE(DB 'system' TABLE 'tables')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED())
-- ;;
INSERT INTO FUNCTION file('/tmp/corpus-out.tsv', 'TSV') SELECT 1
-- ;;
BACKUP DATABASE default TO File('/tmp/corpus-backup')
-- ;;
CREATE NAMED COLLECTION corpus_nc AS url = 'http://127.0.0.1:9/'
-- ;;
CREATE USER corpus_user IDENTIFIED WITH plaintext_password BY 'x'
-- ;;
INSERT INTO t SELECT 1, * FROM executable('cat /etc/hostname', 'LineAsString', 'x String')
-- ;;
ATTACH TABLE stolen FROM '/tmp/somewhere' (a UInt8) ENGINE = MergeTree ORDER BY a
-- ;;
INSERT INTO t /* hidden */ FORMAT Values (1, file('/etc/hostname'))
