-- A realistic application schema: an agent's memory (threads, messages, facts, checkpoints) as the integrations write it.
-- ;;
CREATE TABLE IF NOT EXISTS threads (thread_id String, created_at DateTime64(3, 'UTC'), title String, meta Map(String, String)) ENGINE = ReplacingMergeTree ORDER BY thread_id
-- ;;
CREATE TABLE IF NOT EXISTS messages (thread_id String, seq UInt32, role Enum8('system' = 0, 'user' = 1, 'assistant' = 2, 'tool' = 3), content String, tokens UInt32, at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (thread_id, seq)
-- ;;
CREATE TABLE IF NOT EXISTS facts (subject String, predicate String, object String, confidence Float32, source_seq UInt32, version UInt64, deleted UInt8 DEFAULT 0) ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (subject, predicate)
-- ;;
CREATE TABLE IF NOT EXISTS checkpoints (thread_id String, checkpoint_ns String, checkpoint_id String, parent_id Nullable(String), type String, checkpoint String, metadata String) ENGINE = ReplacingMergeTree ORDER BY (thread_id, checkpoint_ns, checkpoint_id)
-- ;;
CREATE TABLE IF NOT EXISTS writes (thread_id String, checkpoint_ns String, checkpoint_id String, task_id String, idx Int32, channel String, type String, value String) ENGINE = ReplacingMergeTree ORDER BY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
-- ;;
CREATE TABLE IF NOT EXISTS store_items (namespace Array(String), key String, value String, created_at DateTime64(6, 'UTC'), updated_at DateTime64(6, 'UTC'), expires_at Nullable(DateTime64(6, 'UTC')), deleted Bool DEFAULT false) ENGINE = ReplacingMergeTree(updated_at) ORDER BY (namespace, key)
-- ;;
INSERT INTO threads VALUES ('t-001', '2024-05-01 09:00:00.000', 'Trip planning', {'user': 'ann', 'lang': 'en'})
-- ;;
INSERT INTO messages VALUES ('t-001', 1, 'system', 'You are a helpful travel agent.', 8, '2024-05-01 09:00:00.000'), ('t-001', 2, 'user', 'I want to go to Lisbon in June; what''s the weather like?', 14, '2024-05-01 09:00:05.120')
-- ;;
INSERT INTO messages VALUES ('t-001', 3, 'assistant', $$June in Lisbon is warm (25°C) and dry; it's a great time. -- Note: book early!$$, 21, '2024-05-01 09:00:07.900')
-- ;;
INSERT INTO messages VALUES ('t-001', 4, 'tool', '{"tool": "search_flights", "args": {"from": "BER", "to": "LIS"}, "result": [{"price": 129.5}]}', 30, '2024-05-01 09:00:09.000')
-- ;;
INSERT INTO facts VALUES ('ann', 'wants_to_visit', 'Lisbon', 0.95, 2, 1, 0), ('ann', 'travel_month', 'June', 0.9, 2, 1, 0), ('ann', 'home_airport', 'BER', 0.6, 4, 1, 0)
-- ;;
INSERT INTO facts VALUES ('ann', 'home_airport', 'BER', 0.99, 5, 2, 0)
-- ;;
INSERT INTO facts (subject, predicate, object, confidence, source_seq, version, deleted) VALUES ('ann', 'travel_month', '', 0, 6, 3, 1)
-- ;;
INSERT INTO checkpoints VALUES ('t-001', '', '1ef0a-0001', NULL, 'json', '{"v": 1, "channel_values": {"messages": 4}}', '{"step": 1, "source": "loop"}')
-- ;;
INSERT INTO checkpoints VALUES ('t-001', '', '1ef0a-0002', '1ef0a-0001', 'json', '{"v": 1, "channel_values": {"messages": 5}}', '{"step": 2, "source": "loop", "writes": {"agent": {"messages": ["hi"]}}}')
-- ;;
INSERT INTO writes VALUES ('t-001', '', '1ef0a-0002', 'task-a', 0, 'messages', 'json', '"hello"'), ('t-001', '', '1ef0a-0002', 'task-a', 1, 'tool_calls', 'json', '[]'), ('t-001', '', '1ef0a-0002', 'task-b', -1, '__error__', 'json', '{"error": "timeout"}')
-- ;;
INSERT INTO store_items VALUES (['users', 'ann', 'prefs'], 'seat', '{"pref": "aisle"}', '2024-05-01 09:01:00.000000', '2024-05-01 09:01:00.000000', NULL, false)
-- ;;
INSERT INTO store_items VALUES (['users', 'ann', 'prefs'], 'seat', '{"pref": "window"}', '2024-05-01 09:01:00.000000', '2024-05-02 10:00:00.000000', '2024-06-01 00:00:00.000000', false)
-- ;;
INSERT INTO store_items (namespace, key, value, created_at, updated_at, deleted) VALUES (['users', 'ann', 'prefs'], 'meal', '', '2024-05-01 09:01:00', '2024-05-03 00:00:00', true)
-- ;;
INSERT INTO threads VALUES ('t-001', '2024-05-01 09:00:00.000', 'Trip planning: Lisbon', {'user': 'ann', 'lang': 'en', 'pinned': 'true'})
-- ;;
INSERT INTO messages SELECT 't-002', number + 1, if(number % 2 = 0, 'user', 'assistant'), concat('turn ', toString(number)), 5 + number % 20, toDateTime64('2024-05-02 12:00:00', 3, 'UTC') + number FROM numbers(40)
-- ;;
CREATE TABLE thread_stats (thread_id String, messages UInt64, tokens UInt64, last_at DateTime64(3, 'UTC')) ENGINE = ReplacingMergeTree(last_at) ORDER BY thread_id
-- ;;
INSERT INTO thread_stats SELECT thread_id, count(), sum(tokens), max(at) FROM messages GROUP BY thread_id
-- ;;
ALTER TABLE messages UPDATE content = '[redacted]' WHERE role = 'tool' AND thread_id = 't-001'
-- ;;
DELETE FROM messages WHERE thread_id = 't-002' AND seq > 30
-- ;;
SELECT subject, predicate, object FROM facts FINAL ORDER BY subject, predicate
-- ;;
SELECT key, value FROM store_items FINAL WHERE namespace = ['users', 'ann', 'prefs'] AND NOT deleted ORDER BY key
-- ;;
SELECT checkpoint_id, parent_id FROM checkpoints FINAL WHERE thread_id = 't-001' ORDER BY checkpoint_id DESC LIMIT 1
-- ;;
ALTER TABLE facts ADD COLUMN embedding Array(Float32) DEFAULT []
-- ;;
INSERT INTO facts (subject, predicate, object, confidence, source_seq, version, embedding) VALUES ('ann', 'likes', 'seafood', 0.7, 3, 1, [0.12, -0.5, 0.33])
-- ;;
OPTIMIZE TABLE facts FINAL
