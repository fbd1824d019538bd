-- Date, Date32, DateTime and DateTime64 with and without time zones.
-- ;;
CREATE TABLE events
(
    event_date Date,
    event_time DateTime,
    event_time_utc DateTime('UTC'),
    event_time_tokyo DateTime('Asia/Tokyo'),
    precise DateTime64(3),
    precise_ny DateTime64(6, 'America/New_York'),
    birth Date32,
    kind String
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(event_date)
ORDER BY (event_date, event_time)
-- ;;
INSERT INTO events VALUES ('2024-01-15', '2024-01-15 10:30:00', '2024-01-15 10:30:00', '2024-01-15 19:30:00', '2024-01-15 10:30:00.123', '2024-01-15 05:30:00.123456', '1969-07-20', 'literal')
-- ;;
INSERT INTO events VALUES (toDate('2024-02-29'), toDateTime('2024-02-29 23:59:59'), toDateTime('2024-02-29 23:59:59', 'UTC'), toDateTime('2024-03-01 08:59:59', 'Asia/Tokyo'), toDateTime64('2024-02-29 23:59:59.999', 3), toDateTime64('2024-02-29 18:59:59.999999', 6, 'America/New_York'), toDate32('1900-01-01'), 'functions')
-- ;;
INSERT INTO events VALUES ('1970-01-01', '1970-01-01 00:00:00', 0, 0, 0, 0, '2299-12-31', 'epoch')
-- ;;
INSERT INTO events VALUES ('2024-06-01', 1717200000, 1717200000, 1717200000, 1717200000123, '2024-06-01 00:00:00', '2024-06-01', 'unix')
-- ;;
INSERT INTO events VALUES ('2024-03-10', '2024-03-10T02:30:00', '2024-03-10T02:30:00Z', '2024-03-10 02:30:00', '2024-03-10 02:30:00.5', '2024-03-10 02:30:00', '2000-02-29', 'iso')
-- ;;
INSERT INTO events VALUES (toDate('2024-07-04') + 1, toDateTime('2024-07-04 12:00:00') + INTERVAL 1 HOUR, addDays(toDateTime('2024-07-04 00:00:00', 'UTC'), 2), toStartOfDay(toDateTime('2024-07-04 15:00:00', 'Asia/Tokyo')), toDateTime64('2024-07-04 00:00:00', 3) - INTERVAL 500 MILLISECOND, toDateTime64('2024-07-04 00:00:00', 6, 'America/New_York'), toDate32('2024-07-04') - 36500, 'arithmetic')
-- ;;
INSERT INTO events (event_date, event_time, kind) VALUES (toLastDayOfMonth(toDate('2024-04-10')), toStartOfHour(toDateTime('2024-04-10 10:59:59')), 'rounded')
-- ;;
INSERT INTO events (event_date, event_time, kind) VALUES (toDate(parseDateTimeBestEffort('15 Aug 2024')), parseDateTimeBestEffort('2024-08-15T14:00:00+02:00'), 'parsed')
-- ;;
INSERT INTO events SELECT toDate('2024-09-01') + number, toDateTime('2024-09-01 00:00:00') + number * 3600, toDateTime('2024-09-01 00:00:00', 'UTC') + number, toDateTime('2024-09-01 00:00:00', 'Asia/Tokyo'), toDateTime64('2024-09-01 00:00:00', 3) + number, toDateTime64('2024-09-01 00:00:00', 6, 'America/New_York'), toDate32('1950-01-01') + number, 'generated' FROM numbers(40)
-- ;;
CREATE TABLE daily (d Date, n UInt64, first_seen DateTime, last_seen DateTime) ENGINE = MergeTree ORDER BY d
-- ;;
INSERT INTO daily SELECT event_date, count(), min(event_time), max(event_time) FROM events GROUP BY event_date
-- ;;
ALTER TABLE events UPDATE kind = 'weekend' WHERE toDayOfWeek(event_date) IN (6, 7)
-- ;;
ALTER TABLE events DELETE WHERE event_date < '1971-01-01'
-- ;;
ALTER TABLE events ADD COLUMN month String MATERIALIZED formatDateTime(event_date, '%Y-%m')
-- ;;
ALTER TABLE events MODIFY COLUMN precise DateTime64(6)
-- ;;
ALTER TABLE events DROP PARTITION 202406
-- ;;
INSERT INTO events (event_date, event_time, precise_ny, kind) VALUES ('2024-11-03', '2024-11-03 01:30:00', toDateTime64('2024-11-03 01:30:00', 6, 'America/New_York'), 'dst fall back')
-- ;;
CREATE TABLE sessions_tz (id UInt32, started DateTime('Europe/Berlin'), ended Nullable(DateTime64(3, 'Europe/Berlin'))) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO sessions_tz VALUES (1, '2024-03-31 01:59:59', '2024-03-31 03:00:00.000'), (2, '2024-10-27 02:30:00', NULL)
-- ;;
INSERT INTO sessions_tz SELECT number + 10, toDateTime('2024-01-01 00:00:00', 'Europe/Berlin') + number * 86400, NULL FROM numbers(12)
-- ;;
ALTER TABLE sessions_tz UPDATE ended = toDateTime64(started, 3, 'Europe/Berlin') + INTERVAL 90 MINUTE WHERE ended IS NULL
-- ;;
SELECT id, started, ended FROM sessions_tz ORDER BY id LIMIT 5
-- ;;
ALTER TABLE events MODIFY TTL event_date + INTERVAL 100 YEAR
-- ;;
INSERT INTO daily VALUES (toDate(19000), 1, toDateTime(1641600000), toDateTime(1641686399))
