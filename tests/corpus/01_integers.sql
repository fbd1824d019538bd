-- Integers of every width: signed, unsigned, 128/256 bit; literals, negatives, arithmetic.
-- ;;
CREATE TABLE counters
(
    id UInt64,
    i8 Int8,
    i16 Int16,
    i32 Int32,
    i64 Int64,
    u8 UInt8,
    u16 UInt16,
    u32 UInt32
)
ENGINE = MergeTree
ORDER BY id
-- ;;
INSERT INTO counters VALUES (1, -128, -32768, -2147483648, -9223372036854775808, 0, 0, 0)
-- ;;
INSERT INTO counters VALUES (2, 127, 32767, 2147483647, 9223372036854775807, 255, 65535, 4294967295)
-- ;;
INSERT INTO counters VALUES (3, -1, -1, -1, -1, 1, 1, 1), (4, 0, 0, 0, 0, 0, 0, 0), (5, 42, 4200, 420000, 42000000000, 42, 4200, 420000)
-- ;;
insert into counters values (6, 1 + 2, 10 * 3, 100 - 250, -(2 * 3), 200 / 2, 7 % 3, 2 * 2 * 2)
-- ;;
INSERT INTO counters (id, i8, u32) VALUES (7, -5, 123456)
-- ;;
INSERT INTO counters(id,i64)VALUES(8,-1e3)
-- ;;
INSERT INTO counters VALUES (9, toInt8(-3), toInt16('-300'), toInt32(3.9), toInt64('123456789012'), toUInt8(250), toUInt16(65000), toUInt32(4000000000))
-- ;;
CREATE TABLE wide_ints
(
    k UInt32,
    big Int128,
    ubig UInt128,
    huge Int256,
    uhuge UInt256
)
ENGINE = MergeTree
ORDER BY k
-- ;;
INSERT INTO wide_ints VALUES (1, -170141183460469231731687303715884105728, 340282366920938463463374607431768211455, -1, 0)
-- ;;
INSERT INTO wide_ints VALUES (2, toInt128('12345678901234567890123456789'), toUInt128('98765432109876543210'), toInt256('-57896044618658097711785492504343953926634992332820282019728792003956564819968'), toUInt256('115792089237316195423570985008687907853269984665640564039457584007913129639935'))
-- ;;
INSERT INTO wide_ints SELECT number, number * 1000000000000, number, -number, number * number FROM numbers(3, 20)
-- ;;
INSERT INTO counters SELECT 100 + number, toInt8(number - 10), toInt16(number * -100), toInt32(number * 1000), toInt64(number) * -1000000000, toUInt8(number), toUInt16(number * 300), toUInt32(number * 70000) FROM numbers(20)
-- ;;
ALTER TABLE counters ADD COLUMN total Int64 DEFAULT i8 + i16 + i32
-- ;;
ALTER TABLE counters UPDATE u8 = u8 + 1 WHERE id >= 100
-- ;;
ALTER TABLE counters DELETE WHERE id = 4
-- ;;
ALTER TABLE counters MODIFY COLUMN u16 UInt32
-- ;;
INSERT INTO counters (id, u16, total) VALUES (200, 100000, -7)
-- ;;
CREATE TABLE int_sums (bucket UInt8, s Int64, c UInt64) ENGINE = MergeTree ORDER BY bucket
-- ;;
INSERT INTO int_sums SELECT id % 5 AS bucket, sum(i32), count() FROM counters GROUP BY bucket
-- ;;
SELECT bucket, s, c FROM int_sums ORDER BY bucket
-- ;;
INSERT INTO wide_ints (k, big) VALUES (99, -0), (98, +15), (97, 0x7F), (96, 0b101)
-- ;;
OPTIMIZE TABLE counters FINAL
-- ;;
ALTER TABLE wide_ints DELETE WHERE k BETWEEN 10 AND 12
-- ;;
INSERT INTO counters (id, i32) SELECT 300 + number, intDiv(number * 7, 2) FROM numbers(10) WHERE number % 2 = 0
-- ;;
ALTER TABLE counters DROP COLUMN u32
