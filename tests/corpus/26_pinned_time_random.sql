-- now()/today()/rand() and friends in VALUES and DEFAULTs: the gate pins what it can and refuses the rest.
-- ;;
CREATE TABLE heartbeats (host String, seen DateTime('UTC'), seen64 DateTime64(3, 'UTC'), day Date, nonce UInt32) ENGINE = MergeTree ORDER BY (host, seen)
-- ;;
INSERT INTO heartbeats VALUES ('web-1', now(), now64(3), today(), rand())
-- ;;
INSERT INTO heartbeats VALUES ('web-2', now(), now64(3), today(), rand()), ('web-3', now() - INTERVAL 1 MINUTE, now64(3), yesterday(), rand32())
-- ;;
INSERT INTO heartbeats VALUES ('web-4', toStartOfHour(now()), now64(), toDate(now()), rand() % 100)
-- ;;
INSERT INTO heartbeats (host, seen, day) VALUES ('web-5', now('UTC'), today())
-- ;;
CREATE TABLE tokens (token UUID, issued DateTime('UTC'), note String) ENGINE = MergeTree ORDER BY token
-- ;;
INSERT INTO tokens VALUES (generateUUIDv4(), now(), 'uuid v4')
-- ;;
INSERT INTO tokens VALUES (generateUUIDv7(), now(), 'uuid v7'), (generateUUIDv4(), now(), 'second')
-- ;;
INSERT INTO tokens VALUES ('00000000-0000-0000-0000-000000000001', '2024-01-01 00:00:00', 'fixed')
-- ;;
CREATE TABLE jobs (id UInt64, created DateTime('UTC') DEFAULT now(), run_id UUID DEFAULT generateUUIDv4(), name String) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO jobs (id, name) VALUES (1, 'relies on defaults')
-- ;;
INSERT INTO jobs (id, created, run_id, name) VALUES (2, '2024-01-01 00:00:00', '00000000-0000-0000-0000-000000000002', 'explicit values')
-- ;;
INSERT INTO jobs (id, created, run_id, name) VALUES (3, now(), generateUUIDv4(), 'explicit calls')
-- ;;
INSERT INTO jobs (id, name) SELECT number + 10, concat('batch ', toString(number)) FROM numbers(5)
-- ;;
INSERT INTO heartbeats SELECT concat('gen-', toString(number)), now(), now64(3), today(), number FROM numbers(5)
-- ;;
INSERT INTO heartbeats SELECT 'rand-per-row', now(), now64(3), today(), rand() FROM numbers(3)
-- ;;
INSERT INTO heartbeats SELECT 'random-uniform', now(), now64(3), today(), toUInt32(randUniform(0, 1000)) FROM numbers(2)
-- ;;
ALTER TABLE heartbeats UPDATE seen64 = now64(3) WHERE host = 'web-1'
-- ;;
ALTER TABLE heartbeats DELETE WHERE seen < now() - INTERVAL 10 YEAR
-- ;;
DELETE FROM heartbeats WHERE day < today() - 3650
-- ;;
CREATE TABLE expiring (k String, created DateTime) ENGINE = MergeTree ORDER BY k TTL created + INTERVAL 1 DAY
-- ;;
INSERT INTO expiring VALUES ('fresh', now())
-- ;;
CREATE TABLE sampled (id UInt64, bucket UInt8) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO sampled VALUES (1, rand() % 10), (2, randConstant() % 10)
-- ;;
INSERT INTO sampled SELECT number, cityHash64(number) % 10 FROM numbers(20)
-- ;;
INSERT INTO tokens VALUES (generateUUIDv4(), now() + 3600, concat('expires ', toString(today() + 1)))
-- ;;
INSERT INTO jobs (id, created, name) VALUES (4, toDateTime(now(), 'UTC'), formatDateTime(now(), '%Y-%m-%d'))
