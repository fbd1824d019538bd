-- Float32/Float64 (inf, nan, exponents) and Decimal(P,S) of each width.
-- ;;
CREATE TABLE measurements
(
    sensor LowCardinality(String),
    at DateTime('UTC'),
    temp Float32,
    pressure Float64,
    ratio Float64 DEFAULT 0.5
)
ENGINE = MergeTree
ORDER BY (sensor, at)
-- ;;
INSERT INTO measurements VALUES ('s1', '2024-01-01 00:00:00', 21.5, 1013.25, 0.1)
-- ;;
INSERT INTO measurements VALUES ('s1', '2024-01-01 00:05:00', -3.25, 1.013e3, 1e-9), ('s2', '2024-01-01 00:00:00', 0, 0.0, -0.0)
-- ;;
INSERT INTO measurements VALUES ('s3', '2024-01-02 00:00:00', inf, -inf, nan)
-- ;;
INSERT INTO measurements (sensor, at, temp, pressure) VALUES ('s4', '2024-01-03 12:00:00', 3.4028235e38, 1.7976931348623157e308)
-- ;;
INSERT INTO measurements VALUES ('s5', toDateTime('2024-02-01 10:00:00', 'UTC'), toFloat32('12.75'), toFloat64(1) / 3, round(2.0 / 3, 4))
-- ;;
INSERT INTO measurements SELECT concat('gen', toString(number % 3)), toDateTime('2024-03-01 00:00:00', 'UTC') + number * 60, number / 7, sqrt(number), exp(-number) FROM numbers(50)
-- ;;
CREATE TABLE ledger
(
    entry_id UInt64,
    amount Decimal(18, 2),
    fee Decimal32(4),
    balance Decimal64(6),
    precise Decimal128(20),
    giant Decimal256(40),
    rate Decimal(9, 9)
)
ENGINE = MergeTree
ORDER BY entry_id
-- ;;
INSERT INTO ledger VALUES (1, 100.50, 0.0025, 1000000.123456, 1.12345678901234567890, 3.1415926535897932384626433832795028841971, 0.123456789)
-- ;;
INSERT INTO ledger VALUES (2, -99999999.99, -0.5, -0.000001, -1, 0, -0.999999999)
-- ;;
INSERT INTO ledger VALUES (3, toDecimal64('12.34', 2), toDecimal32(1.5, 4), CAST('42.000042' AS Decimal64(6)), toDecimal128('0.00000000000000000001', 20), toDecimal256('1', 40), 0)
-- ;;
INSERT INTO ledger (entry_id, amount) VALUES (4, 10 * 1.1), (5, 7 / 2), (6, '123.45')
-- ;;
INSERT INTO ledger SELECT 10 + number, toDecimal64(number * 12.5, 2), toDecimal32(number, 4) / 100, toDecimal64(number, 6) * 3, number, number, 0 FROM numbers(25)
-- ;;
ALTER TABLE ledger UPDATE fee = fee * 2 WHERE entry_id > 20
-- ;;
ALTER TABLE ledger ADD COLUMN amount_f Float64 MATERIALIZED toFloat64(amount)
-- ;;
CREATE TABLE ledger_totals (day UInt8, total Decimal(38, 2), avg_fee Float64) ENGINE = MergeTree ORDER BY day
-- ;;
INSERT INTO ledger_totals SELECT entry_id % 7, sum(amount), round(avg(toFloat64(fee)), 6) FROM ledger GROUP BY entry_id % 7
-- ;;
ALTER TABLE measurements MODIFY COLUMN temp Float64
-- ;;
ALTER TABLE measurements DELETE WHERE isNaN(ratio)
-- ;;
INSERT INTO measurements (sensor, at, temp, pressure) VALUES ('s6', '2024-05-05 05:05:05', -1.5e-7, 6.02214076e23)
-- ;;
SELECT sensor, count(), round(avg(temp), 3) FROM measurements GROUP BY sensor ORDER BY sensor
-- ;;
OPTIMIZE TABLE ledger FINAL
-- ;;
ALTER TABLE ledger MODIFY COLUMN fee Decimal64(4)
-- ;;
INSERT INTO ledger (entry_id, amount, fee) VALUES (100, 0.01, 0.0001)
-- ;;
ALTER TABLE ledger RENAME COLUMN rate TO interest_rate
