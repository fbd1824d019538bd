-- String and FixedString: escapes, quotes, heredocs, unicode, comments inside statements.
-- ;;
CREATE TABLE notes
(
    id UInt32,
    title String,
    body String,
    code FixedString(3),
    tag FixedString(8) DEFAULT 'none'
)
ENGINE = MergeTree
ORDER BY id
-- ;;
INSERT INTO notes VALUES (1, 'hello', 'world', 'abc', 'first')
-- ;;
INSERT INTO notes VALUES (2, 'it''s quoted', 'back\\slash and \'escaped\' quote', 'x', 'two')
-- ;;
INSERT INTO notes VALUES (3, $$it's a heredoc$$, $$multi
line
heredoc with 'quotes' and -- not a comment$$, 'hd', 'heredoc')
-- ;;
INSERT INTO notes VALUES (4, 'tab\there', 'newline\nhere', 'nl', 'esc')
-- ;;
INSERT INTO notes VALUES (5, 'Grüße', '日本語のテキスト', 'utf', 'unicode')
-- ;;
INSERT INTO notes /* a block comment */ VALUES (6, 'commented', 'statement', 'cmt', 'comment')
-- ;;
INSERT INTO notes -- a line comment before the values
VALUES (7, 'line', 'comment', 'lc', 'line')
-- ;;
INSERT INTO notes VALUES (8, concat('con', 'cat'), upper('shout'), substring('abcdef', 2, 3), 'expr')
-- ;;
INSERT INTO notes VALUES (9, '', '', '', '')
-- ;;
INSERT INTO notes (id, title) VALUES (10, 'only title'), (11, 'semi; colon'), (12, 'dash -- dash'), (13, 'slash /* star */')
-- ;;
InSeRt   InTo   notes   VaLuEs   (14,   'odd',   'spacing',   'sp',   'case')
-- ;;
INSERT INTO notes VALUES
    (15, 'multi', 'row', 'm1', 'a'),
    (16, 'multi', 'row', 'm2', 'b'),
    (17, 'multi', 'row', 'm3', 'c')
-- ;;
INSERT INTO notes SELECT 100 + number, concat('gen-', toString(number)), repeat('x', number), leftPad(toString(number), 3, '0'), 'gen' FROM numbers(30)
-- ;;
INSERT INTO notes VALUES (18, 'emoji 🎉', 'percent % and underscore _', 'emj', 'sym')
-- ;;
INSERT INTO notes VALUES (19, 'null byte \0 inside', 'hex \x41\x42', 'hx', 'bytes')
-- ;;
ALTER TABLE notes ADD COLUMN title_len UInt64 MATERIALIZED length(title)
-- ;;
ALTER TABLE notes UPDATE body = concat(body, ' (edited)') WHERE id < 5
-- ;;
ALTER TABLE notes UPDATE title = replaceAll(title, 'multi', 'many') WHERE title = 'multi'
-- ;;
ALTER TABLE notes DELETE WHERE title LIKE 'gen-2%'
-- ;;
ALTER TABLE notes MODIFY COLUMN tag String
-- ;;
ALTER TABLE notes COMMENT COLUMN body 'free text of the note'
-- ;;
CREATE TABLE words (w String) ENGINE = MergeTree ORDER BY w
-- ;;
INSERT INTO words SELECT arrayJoin(splitByChar(' ', 'the quick brown fox jumps over the lazy dog'))
-- ;;
INSERT INTO words SELECT lower(title) FROM notes WHERE id < 10
-- ;;
SELECT w, count() FROM words GROUP BY w ORDER BY w
-- ;;
INSERT INTO notes (id, title, body) VALUES (20, format('{} + {}', 'a', 'b'), reverse('olleh'))
