-- Nullable columns of many types, NULL literals, coalesce and IS NULL in mutations.
-- ;;
CREATE TABLE profiles
(
    user_id UInt64,
    nickname Nullable(String),
    age Nullable(UInt8),
    score Nullable(Float64),
    balance Nullable(Decimal(12, 2)),
    signup Nullable(Date),
    last_login Nullable(DateTime('UTC')),
    referrer Nullable(UUID)
)
ENGINE = MergeTree
ORDER BY user_id
-- ;;
INSERT INTO profiles VALUES (1, 'ann', 31, 4.5, 10.00, '2023-01-01', '2024-01-01 08:00:00', '11111111-2222-3333-4444-555555555555')
-- ;;
INSERT INTO profiles VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
-- ;;
INSERT INTO profiles VALUES (3, null, 20, Null, 0, '2023-06-01', NULL, NULL), (4, 'dee', NULL, -1.5, -3.25, NULL, '2024-02-02 02:02:02', NULL)
-- ;;
INSERT INTO profiles (user_id) VALUES (5), (6), (7)
-- ;;
INSERT INTO profiles (user_id, nickname, age) VALUES (8, CAST(NULL AS Nullable(String)), toNullable(40))
-- ;;
INSERT INTO profiles SELECT 100 + number, if(number % 3 = 0, NULL, concat('u', toString(number))), if(number % 4 = 0, NULL, toUInt8(18 + number)), nullIf(number % 5, 0) / 2, NULL, toDate('2023-01-01') + number, NULL, NULL FROM numbers(40)
-- ;;
ALTER TABLE profiles UPDATE nickname = concat('anon-', toString(user_id)) WHERE nickname IS NULL
-- ;;
ALTER TABLE profiles UPDATE age = coalesce(age, 0) + 1 WHERE user_id >= 100
-- ;;
ALTER TABLE profiles DELETE WHERE score IS NULL AND balance IS NULL AND user_id < 10
-- ;;
ALTER TABLE profiles MODIFY COLUMN age Nullable(UInt16)
-- ;;
ALTER TABLE profiles ADD COLUMN email Nullable(String) AFTER nickname
-- ;;
INSERT INTO profiles (user_id, nickname, email) VALUES (9, 'eve', 'eve@example.com')
-- ;;
CREATE TABLE profile_summary (bucket Nullable(UInt8), users UInt64, avg_score Nullable(Float64)) ENGINE = MergeTree ORDER BY tuple()
-- ;;
INSERT INTO profile_summary SELECT intDiv(age, 10), count(), avg(score) FROM profiles GROUP BY intDiv(age, 10)
-- ;;
CREATE TABLE sparse (k UInt32, a Nullable(Int32), b Array(Nullable(String)), c Tuple(x Nullable(Int8), y String)) ENGINE = MergeTree ORDER BY k
-- ;;
INSERT INTO sparse VALUES (1, NULL, [NULL, 'a', NULL], (NULL, 'y')), (2, 5, [], (3, '')), (3, -5, ['b'], (NULL, 'z'))
-- ;;
INSERT INTO sparse SELECT number + 10, if(number % 2, number, NULL), [if(number % 3 = 0, NULL, toString(number))], (NULL, 'gen') FROM numbers(15)
-- ;;
ALTER TABLE sparse UPDATE a = -1 WHERE a IS NULL
-- ;;
ALTER TABLE sparse MODIFY COLUMN a Int32 DEFAULT -1
-- ;;
SELECT count(), countIf(nickname IS NULL), countIf(age IS NULL) FROM profiles
-- ;;
ALTER TABLE profiles DROP COLUMN referrer
-- ;;
INSERT INTO profiles (user_id, score, balance) VALUES (10, 1 / 0, NULL), (11, -0.0, 12.345)
-- ;;
OPTIMIZE TABLE profiles FINAL
-- ;;
ALTER TABLE profiles MODIFY COLUMN nickname String DEFAULT ''
