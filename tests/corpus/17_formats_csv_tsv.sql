-- INSERT with inline data in CSV, TSV, CSVWithNames, TSVWithNames and FORMAT Values.
-- ;;
CREATE TABLE contacts (id UInt32, name String, email Nullable(String), score Float64, joined Date, tags Array(String)) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO contacts FORMAT CSV
1,"Ann Smith","ann@example.com",4.5,2024-01-01,"['a','b']"
2,"Bob, Jr.",\N,3,2024-01-02,"[]"
3,"Cat ""The Cat"" Jones","cat@example.com",-1.25,2024-01-03,"['x']"
-- ;;
INSERT INTO contacts FORMAT TSV
4	Dee	dee@example.com	0	2024-02-01	['t']
5	Eve\tTab	\N	1e3	2024-02-02	[]
-- ;;
INSERT INTO contacts FORMAT CSVWithNames
"id","name","email","score","joined","tags"
6,"Finn","finn@example.com",2.5,2024-03-01,"['csv','names']"
7,"Gus","",0,2024-03-02,"[]"
-- ;;
INSERT INTO contacts FORMAT TSVWithNames
id	name	email	score	joined	tags
8	Hal	hal@example.com	9.75	2024-04-01	['tsv']
-- ;;
INSERT INTO contacts (id, name, score, joined) FORMAT CSV
9,"Ivy",1.0,2024-05-01
10,"Jon",2.0,2024-05-02
-- ;;
INSERT INTO contacts FORMAT Values (11, 'Kim', NULL, 7.5, '2024-06-01', ['values'])
-- ;;
INSERT INTO contacts FORMAT Values (12, 'Lee', 'lee@example.com', 1, '2024-06-02', []), (13, 'Mo', NULL, 2, '2024-06-03', ['m'])
-- ;;
insert into contacts format CSV
14,"lower case keywords",\N,0,2024-07-01,"[]"
-- ;;
INSERT INTO contacts FORMAT CSV
15,"multi
line name",\N,0,2024-07-02,"[]"
-- ;;
CREATE TABLE csv_raw (line_no UInt32, a String, b String) ENGINE = MergeTree ORDER BY line_no
-- ;;
INSERT INTO csv_raw FORMAT CSV
1,"semicolon; inside","-- not a comment"
2,"/* nor this */","'single quotes'"
3,"",""
-- ;;
INSERT INTO csv_raw FORMAT TabSeparated
4	back\\slash	new\nline
-- ;;
INSERT INTO csv_raw FORMAT TSVRaw
5	raw text	no escapes here
-- ;;
INSERT INTO csv_raw FORMAT TSKV
line_no=6	a=tskv	b=key value pairs
-- ;;
INSERT INTO csv_raw SETTINGS format_csv_delimiter = ';' FORMAT CSV
7;"semicolon delimited";x
-- ;;
INSERT INTO csv_raw FORMAT CSVWithNamesAndTypes
"line_no","a","b"
"UInt32","String","String"
8,"with","types"
-- ;;
INSERT INTO csv_raw FORMAT TSVWithNamesAndTypes
line_no	a	b
UInt32	String	String
9	tsv	typed
-- ;;
ALTER TABLE contacts UPDATE email = concat(lower(name), '@example.org') WHERE email IS NULL OR email = ''
-- ;;
ALTER TABLE contacts DELETE WHERE score < 0
-- ;;
CREATE TABLE contact_domains (domain String, n UInt64) ENGINE = SummingMergeTree ORDER BY domain
-- ;;
INSERT INTO contact_domains SELECT domain(concat('http://', splitByChar('@', assumeNotNull(email))[2])), 1 FROM contacts
-- ;;
INSERT INTO csv_raw FORMAT CSV
10,"trailing comma row","x"
11,"unicode ✓","ü"
-- ;;
INSERT INTO csv_raw (line_no, a) FORMAT TSV
12	only two columns
-- ;;
INSERT INTO contacts FORMAT Values (16, $$heredoc in Values format$$, NULL, 0, '2024-08-01', [])
