-- Enum8/Enum16, LowCardinality and Bool.
-- ;;
CREATE TABLE tickets
(
    id UInt32,
    status Enum8('open' = 1, 'in_progress' = 2, 'closed' = 3),
    priority Enum16('low' = -100, 'medium' = 0, 'high' = 100, 'critical' = 1000),
    team LowCardinality(String),
    region LowCardinality(Nullable(String)),
    urgent Bool,
    archived Boolean DEFAULT false
)
ENGINE = MergeTree
ORDER BY id
-- ;;
INSERT INTO tickets VALUES (1, 'open', 'low', 'infra', 'eu', true, false)
-- ;;
INSERT INTO tickets VALUES (2, 2, 100, 'web', NULL, 1, 0)
-- ;;
INSERT INTO tickets VALUES (3, 'closed', 'critical', 'infra', 'us', FALSE, TRUE), (4, 'open', 'medium', 'data', 'apac', 'true', 'false')
-- ;;
INSERT INTO tickets (id, status, priority, team, urgent) VALUES (5, CAST('in_progress' AS Enum8('open' = 1, 'in_progress' = 2, 'closed' = 3)), 'high', toLowCardinality('mobile'), NOT 0)
-- ;;
INSERT INTO tickets SELECT 10 + number, ['open', 'in_progress', 'closed'][number % 3 + 1], ['low', 'medium', 'high', 'critical'][number % 4 + 1], concat('team', toString(number % 4)), if(number % 5 = 0, NULL, 'eu'), number % 2 = 0, number > 15 FROM numbers(30)
-- ;;
ALTER TABLE tickets UPDATE status = 'closed' WHERE archived
-- ;;
ALTER TABLE tickets MODIFY COLUMN status Enum8('open' = 1, 'in_progress' = 2, 'closed' = 3, 'reopened' = 4)
-- ;;
INSERT INTO tickets (id, status, priority, team, urgent) VALUES (100, 'reopened', 'low', 'infra', true)
-- ;;
ALTER TABLE tickets ADD COLUMN severity LowCardinality(String) DEFAULT toString(priority)
-- ;;
ALTER TABLE tickets DELETE WHERE team = 'team3' AND NOT urgent
-- ;;
CREATE TABLE team_stats (team LowCardinality(String), open_count UInt64, urgent_count UInt64) ENGINE = MergeTree ORDER BY team
-- ;;
INSERT INTO team_stats SELECT team, countIf(status = 'open'), countIf(urgent) FROM tickets GROUP BY team
-- ;;
CREATE TABLE flags (name String, enabled Bool, rollout Enum8('off' = 0, 'beta' = 1, 'ga' = 2)) ENGINE = ReplacingMergeTree ORDER BY name
-- ;;
INSERT INTO flags VALUES ('dark_mode', true, 'ga'), ('new_search', false, 'beta'), ('exp', false, 'off')
-- ;;
INSERT INTO flags VALUES ('new_search', true, 'ga')
-- ;;
OPTIMIZE TABLE flags FINAL
-- ;;
SELECT name, enabled, rollout FROM flags FINAL ORDER BY name
-- ;;
ALTER TABLE flags ADD COLUMN owner LowCardinality(String) DEFAULT 'platform' AFTER name
-- ;;
INSERT INTO flags (name, enabled, rollout, owner) VALUES ('billing_v2', 1, 1, 'payments')
-- ;;
ALTER TABLE tickets MODIFY COLUMN team String
-- ;;
ALTER TABLE tickets MODIFY COLUMN team LowCardinality(String)
-- ;;
INSERT INTO tickets (id, status, priority, team, region, urgent) VALUES (101, 'open', 'high', 'sec', 'eu', 1), (102, 'open', -100, 'sec', NULL, 0)
-- ;;
ALTER TABLE flags UPDATE enabled = NOT enabled WHERE rollout = 'off'
-- ;;
CREATE TABLE enum_map (code Enum16('a' = 1, 'b' = 2, 'c' = 300), label String) ENGINE = TinyLog
-- ;;
INSERT INTO enum_map VALUES ('a', 'alpha'), ('b', 'bravo'), (300, 'charlie')
