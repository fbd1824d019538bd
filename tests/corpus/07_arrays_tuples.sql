-- Array (nested too) and Tuple (plain and named) columns, literals and functions.
-- ;;
CREATE TABLE docs
(
    id UInt32,
    tags Array(String),
    scores Array(Float32),
    matrix Array(Array(Int16)),
    point Tuple(Float64, Float64),
    meta Tuple(author String, version UInt16, draft Bool)
)
ENGINE = MergeTree
ORDER BY id
-- ;;
INSERT INTO docs VALUES (1, ['a', 'b'], [0.5, 1.5], [[1, 2], [3]], (1.0, 2.0), ('ann', 1, false))
-- ;;
INSERT INTO docs VALUES (2, [], [], [], (0, 0), ('', 0, true))
-- ;;
INSERT INTO docs VALUES (3, array('x', 'y', 'z'), [-1, 0, 1e3], [[-32768], [], [32767, 0]], tuple(-1.5, 2.25), tuple('bob', 65535, 1))
-- ;;
INSERT INTO docs VALUES (4, arrayMap(x -> concat('t', toString(x)), range(3)), arrayConcat([1.0], [2.0, 3.0]), [range(4)], (pi(), e()), ('cat', 2 + 3, 0))
-- ;;
INSERT INTO docs VALUES (5, ['it''s', $$quote's$$, 'comma, inside', '[bracket]'], [nan], [[1]], (1e-300, -1e300), ('dee', 7, true))
-- ;;
INSERT INTO docs (id, tags) VALUES (6, splitByString(', ', 'red, green, blue')), (7, arraySort(['b', 'c', 'a'])), (8, arrayDistinct(['a', 'a', 'b']))
-- ;;
INSERT INTO docs SELECT 100 + number, arrayMap(i -> toString(i), range(number % 5)), [toFloat32(number)], [[toInt16(number)], [toInt16(-number)]], (number, number * 2), (concat('gen', toString(number)), number, number % 2 = 1) FROM numbers(30)
-- ;;
ALTER TABLE docs UPDATE tags = arrayPushBack(tags, 'reviewed') WHERE meta.draft = false
-- ;;
ALTER TABLE docs DELETE WHERE has(tags, '3')
-- ;;
ALTER TABLE docs ADD COLUMN tag_count UInt32 MATERIALIZED length(tags)
-- ;;
ALTER TABLE docs ADD COLUMN first_tag String ALIAS tags[1]
-- ;;
CREATE TABLE tag_index (tag String, doc_id UInt32) ENGINE = MergeTree ORDER BY (tag, doc_id)
-- ;;
INSERT INTO tag_index SELECT arrayJoin(tags) AS tag, id FROM docs
-- ;;
INSERT INTO tag_index SELECT tag, id FROM docs ARRAY JOIN tags AS tag WHERE id < 10
-- ;;
CREATE TABLE pairs (k String, kv Array(Tuple(String, UInt32)), nested_t Tuple(a Array(UInt8), b Tuple(c String, d Float32))) ENGINE = MergeTree ORDER BY k
-- ;;
INSERT INTO pairs VALUES ('p1', [('a', 1), ('b', 2)], ([1, 2, 3], ('x', 0.5))), ('p2', [], ([], ('', 0)))
-- ;;
INSERT INTO pairs SELECT concat('g', toString(number)), arrayMap(i -> (toString(i), toUInt32(i * i)), range(number)), (range(number), (toString(number), number / 2)) FROM numbers(8)
-- ;;
ALTER TABLE pairs UPDATE kv = arrayFilter(x -> x.2 > 1, kv) WHERE length(kv) > 3
-- ;;
CREATE TABLE tag_stats (tag String, docs UInt64, ids Array(UInt32)) ENGINE = MergeTree ORDER BY tag
-- ;;
INSERT INTO tag_stats SELECT tag, count(), groupArray(doc_id) FROM (SELECT tag, doc_id FROM tag_index ORDER BY doc_id) GROUP BY tag
-- ;;
ALTER TABLE docs MODIFY COLUMN scores Array(Float64)
-- ;;
INSERT INTO docs (id, point, meta) VALUES (50, (3, 4), ('zed', 3, false))
-- ;;
ALTER TABLE docs UPDATE point = (point.1 + 1, point.2 - 1) WHERE id = 50
-- ;;
SELECT id, tags, point, meta.author FROM docs WHERE id < 10 ORDER BY id
-- ;;
INSERT INTO pairs VALUES ('p3', [('z', 26)], (arrayReverse([1, 2]), ('rev', -1)))
-- ;;
ALTER TABLE docs DROP COLUMN matrix
-- ;;
OPTIMIZE TABLE tag_index FINAL
