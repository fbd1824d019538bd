-- The same kinds of statement in the spellings people actually type: keyword case, spacing, comments, parentheses, trailing semicolons.
-- ;;
create table lower_case (id UInt32, name String, ok bool) engine = MergeTree order by id
-- ;;
CREATE    TABLE
    spaced   (
  id    UInt32 ,
  name  String
 )   ENGINE=MergeTree()   ORDER   BY   (id)
-- ;;
CrEaTe TaBlE MiXeD (Id UInt32, Val String) EnGiNe = Log
-- ;;
insert into lower_case values (1, 'a', true);
-- ;;
INSERT INTO lower_case VALUES(2,'b',false)
-- ;;
INSERT INTO lower_case VALUES (3, 'c', 1) , (4 , 'd' , 0)
-- ;;
INSERT	INTO	spaced	VALUES	(1,	'tabs')
-- ;;
INSERT INTO spaced
VALUES
(2,
'newlines'
)
-- ;;
/* leading block comment */ INSERT INTO spaced VALUES (3, 'leading comment')
-- ;;
-- leading line comment
INSERT INTO spaced VALUES (4, 'leading line comment')
-- ;;
INSERT INTO spaced VALUES (5, 'trailing comment') -- trailing
-- ;;
INSERT INTO spaced /* mid */ VALUES (6, 'block comment before VALUES')
-- ;;
INSERT INTO spaced (name, id) VALUES ('reordered columns', 7)
-- ;;
INSERT INTO TABLE spaced VALUES (8, 'INSERT INTO TABLE')
-- ;;
INSERT INTO default.spaced VALUES (9, 'qualified with the logical db')
-- ;;
INSERT INTO `spaced` VALUES (10, 'backticks')
-- ;;
INSERT INTO spaced VALUES (11, 'values with /* comment */ inside the string')
-- ;;
INSERT INTO MiXeD VALUES (1, 'mixed-case table')
-- ;;
insert into MiXeD (Id, Val) select number, toString(number) from numbers(3)
-- ;;
Alter Table lower_case Add Column extra String Default 'x'
-- ;;
alter table lower_case update name = upper(name) where id < 3
-- ;;
alter table lower_case delete where id = 4
-- ;;
delete from lower_case where name = 'C'
-- ;;
optimize table lower_case final
-- ;;
truncate table MiXeD
-- ;;
rename table spaced to spaced_out
-- ;;
create table if not exists default.qualified (k UInt8) engine = Memory
-- ;;
insert into default.qualified select 1
-- ;;
drop table if exists default.qualified
-- ;;
INSERT INTO spaced_out SELECT id + 100, name FROM spaced_out WHERE id < 3;
-- ;;
INSERT INTO spaced_out VALUES (200, 'semicolon;inside'), (201, ';')
-- ;;
INSERT INTO spaced_out SETTINGS async_insert = 0 VALUES (202, 'insert with settings')
