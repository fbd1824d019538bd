-- Plain and parameterized views, dictionaries over the object's tables (layouts, lifetimes), dictGet in writes.
-- ;;
CREATE TABLE countries (code String, name String, population UInt64, continent LowCardinality(String)) ENGINE = MergeTree ORDER BY code
-- ;;
INSERT INTO countries VALUES ('DE', 'Germany', 84000000, 'EU'), ('FR', 'France', 68000000, 'EU'), ('JP', 'Japan', 124000000, 'AS'), ('US', 'United States', 335000000, 'NA'), ('BR', 'Brazil', 216000000, 'SA')
-- ;;
CREATE VIEW big_countries AS SELECT code, name FROM countries WHERE population > 100000000
-- ;;
CREATE OR REPLACE VIEW big_countries AS SELECT code, name, population FROM countries WHERE population > 80000000
-- ;;
CREATE VIEW by_continent AS SELECT continent, count() AS n, sum(population) AS pop FROM countries GROUP BY continent
-- ;;
CREATE VIEW countries_on (c String) AS SELECT code, name FROM countries WHERE continent = {c:String}
-- ;;
CREATE DICTIONARY country_dict (code String, name String, population UInt64) PRIMARY KEY code SOURCE(CLICKHOUSE(TABLE 'countries')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED())
-- ;;
CREATE TABLE city_ids (id UInt64, city String, country_code String) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO city_ids VALUES (1, 'Berlin', 'DE'), (2, 'Paris', 'FR'), (3, 'Tokyo', 'JP'), (4, 'Austin', 'US'), (5, 'Recife', 'BR')
-- ;;
CREATE DICTIONARY city_dict (id UInt64, city String DEFAULT '?', country_code String) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 'city_ids')) LIFETIME(MIN 0 MAX 1000) LAYOUT(FLAT())
-- ;;
CREATE DICTIONARY city_dict_hashed (id UInt64, city String, country_code String) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 'city_ids')) LIFETIME(300) LAYOUT(HASHED())
-- ;;
CREATE DICTIONARY country_db_dict (code String, continent String) PRIMARY KEY code SOURCE(CLICKHOUSE(DB 'default' TABLE 'countries')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED())
-- ;;
CREATE DICTIONARY city_dict_cache (id UInt64, city String, country_code String) PRIMARY KEY id SOURCE(CLICKHOUSE(QUERY 'SELECT id, city, country_code FROM city_ids')) LIFETIME(60) LAYOUT(CACHE(SIZE_IN_CELLS 1024))
-- ;;
CREATE DICTIONARY city_sparse (id UInt64, city String, country_code String) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 'city_ids')) LIFETIME(0) LAYOUT(SPARSE_HASHED())
-- ;;
CREATE TABLE ranges (id UInt64, start Date, stop Date, rate Float64) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO ranges VALUES (1, '2024-01-01', '2024-06-30', 0.1), (1, '2024-07-01', '2024-12-31', 0.2)
-- ;;
CREATE DICTIONARY rate_dict (id UInt64, start Date, stop Date, rate Float64) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 'ranges')) LIFETIME(0) LAYOUT(RANGE_HASHED()) RANGE(MIN start MAX stop)
-- ;;
CREATE TABLE visits_enriched (city_id UInt64, city String, country String, rate Float64) ENGINE = MergeTree ORDER BY city_id
-- ;;
INSERT INTO visits_enriched SELECT id, dictGet('city_dict', 'city', id), dictGet('country_dict', 'name', tuple(dictGet('city_dict', 'country_code', id))), dictGetOrDefault('rate_dict', 'rate', 1, toDate('2024-08-01'), 0.0) FROM city_ids
-- ;;
INSERT INTO visits_enriched SELECT id, dictGetString('city_dict_hashed', 'city', id), 'x', 0 FROM city_ids WHERE dictHas('city_dict_hashed', id)
-- ;;
CREATE TABLE continent_pop (continent String, n UInt64, pop UInt64) ENGINE = MergeTree ORDER BY continent
-- ;;
INSERT INTO continent_pop SELECT * FROM by_continent
-- ;;
INSERT INTO city_ids SELECT 100 + number, concat('gen', toString(number)), 'DE' FROM numbers(5)
-- ;;
INSERT INTO visits_enriched SELECT c.id, c.city, b.name, 0 FROM city_ids AS c JOIN countries_on(c = 'EU') AS b ON c.country_code = b.code
-- ;;
SELECT dictGet('city_dict', 'city', toUInt64(3)), dictGet('country_dict', 'population', tuple('JP'))
-- ;;
SELECT * FROM big_countries ORDER BY code
-- ;;
DROP DICTIONARY city_sparse
-- ;;
DROP DICTIONARY IF EXISTS city_dict_cache
-- ;;
DROP VIEW IF EXISTS by_continent
-- ;;
CREATE DICTIONARY country_ip (code String, name String) PRIMARY KEY code SOURCE(CLICKHOUSE(TABLE 'countries' USER 'default' PASSWORD '')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED_ARRAY())
