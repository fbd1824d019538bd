-- ALTER UPDATE/DELETE mutations, lightweight DELETE FROM, TRUNCATE, partition operations.
-- ;;
CREATE TABLE accounts (id UInt64, owner String, balance Decimal(18, 2), status LowCardinality(String), region String) ENGINE = MergeTree PARTITION BY region ORDER BY id
-- ;;
INSERT INTO accounts SELECT number, concat('owner-', toString(number)), toDecimal64(number * 3.5, 2), if(number % 7 = 0, 'frozen', 'active'), ['eu', 'us', 'apac'][number % 3 + 1] FROM numbers(300)
-- ;;
ALTER TABLE accounts UPDATE balance = balance * 1.01 WHERE status = 'active'
-- ;;
ALTER TABLE accounts UPDATE status = 'closed', balance = 0 WHERE id IN (1, 2, 3)
-- ;;
ALTER TABLE accounts DELETE WHERE balance = 0 AND status = 'closed'
-- ;;
ALTER TABLE accounts UPDATE owner = upper(owner) IN PARTITION 'eu' WHERE id < 50
-- ;;
ALTER TABLE accounts DELETE IN PARTITION 'apac' WHERE id > 290
-- ;;
DELETE FROM accounts WHERE id = 10
-- ;;
DELETE FROM accounts WHERE owner LIKE 'owner-2%' AND region = 'us'
-- ;;
DELETE FROM accounts IN PARTITION 'eu' WHERE id BETWEEN 100 AND 120
-- ;;
ALTER TABLE accounts UPDATE balance = balance - 1 WHERE 1
-- ;;
ALTER TABLE accounts DELETE WHERE id IN (SELECT id FROM accounts WHERE status = 'frozen' AND id > 200)
-- ;;
ALTER TABLE accounts UPDATE owner = owner WHERE 0
-- ;;
CREATE TABLE accounts_archive AS accounts
-- ;;
INSERT INTO accounts_archive SELECT * FROM accounts WHERE status = 'frozen'
-- ;;
ALTER TABLE accounts_archive DROP PARTITION 'us'
-- ;;
ALTER TABLE accounts_archive MOVE PARTITION 'eu' TO TABLE accounts
-- ;;
ALTER TABLE accounts_archive REPLACE PARTITION 'apac' FROM accounts
-- ;;
ALTER TABLE accounts_archive ATTACH PARTITION 'us' FROM accounts
-- ;;
ALTER TABLE accounts UPDATE status = 'reviewed' IN PARTITION 'eu' WHERE status = 'frozen'
-- ;;
TRUNCATE TABLE accounts_archive
-- ;;
TRUNCATE accounts_archive
-- ;;
INSERT INTO accounts_archive SELECT * FROM accounts ORDER BY id LIMIT 5
-- ;;
ALTER TABLE accounts UPDATE balance = round(balance, 0) WHERE region = 'us' SETTINGS mutations_sync = 2
-- ;;
CREATE TABLE scratch_mut (k UInt32, v String) ENGINE = MergeTree ORDER BY k SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1
-- ;;
INSERT INTO scratch_mut SELECT number, toString(number) FROM numbers(100)
-- ;;
UPDATE scratch_mut SET v = 'lightweight' WHERE k < 10
-- ;;
DELETE FROM scratch_mut WHERE k % 10 = 5
-- ;;
SELECT region, status, count(), sum(balance) FROM accounts GROUP BY region, status ORDER BY region, status
-- ;;
TRUNCATE TABLE IF EXISTS scratch_mut
