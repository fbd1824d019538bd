-- UUID, IPv4 and IPv6 columns: literals, conversions, keys.
-- ;;
CREATE TABLE visits
(
    visit_id UUID,
    session_id UUID DEFAULT '00000000-0000-0000-0000-000000000000',
    client_v4 IPv4,
    client_v6 IPv6,
    path String,
    status UInt16
)
ENGINE = MergeTree
ORDER BY (client_v4, visit_id)
-- ;;
INSERT INTO visits VALUES ('6ba7b810-9dad-11d1-80b4-00c04fd430c8', '6ba7b811-9dad-11d1-80b4-00c04fd430c8', '192.168.0.1', '2001:db8::1', '/index', 200)
-- ;;
INSERT INTO visits VALUES (toUUID('123e4567-e89b-12d3-a456-426614174000'), toUUID('00000000-0000-0000-0000-000000000001'), toIPv4('10.0.0.255'), toIPv6('::ffff:10.0.0.255'), '/login', 302)
-- ;;
INSERT INTO visits VALUES ('f81d4fae-7dec-11d0-a765-00a0c91e6bf6', DEFAULT, '0.0.0.0', '::', '/', 404), ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', DEFAULT, '255.255.255.255', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '/health', 500)
-- ;;
INSERT INTO visits (visit_id, client_v4, client_v6, path, status) VALUES ('5c9c1f1c-3a1e-4c3a-9f0d-1a2b3c4d5e6f', IPv4StringToNum('172.16.5.4'), IPv6StringToNum('fe80::1'), '/braces', 200)
-- ;;
INSERT INTO visits SELECT reinterpretAsUUID(unhex(lpad(hex(cityHash64(number)), 32, '0'))), reinterpretAsUUID(unhex(lpad(hex(cityHash64(number + 1000)), 32, '0'))), toIPv4(3232235520 + number), IPv4ToIPv6(toIPv4(167772160 + number)), concat('/p/', toString(number)), [200, 301, 404, 500][number % 4 + 1] FROM numbers(30)
-- ;;
CREATE TABLE known_hosts (id UInt32, addr IPv4, net IPv6, host_uuid UUID) ENGINE = MergeTree ORDER BY id
-- ;;
INSERT INTO known_hosts VALUES (1, '8.8.8.8', '2001:4860:4860::8888', '00112233-4455-6677-8899-aabbccddeeff'), (2, '1.1.1.1', '2606:4700:4700::1111', '00112233-4455-6677-8899-aabbccddeef0')
-- ;;
INSERT INTO known_hosts SELECT 10 + number, toIPv4(concat('10.1.', toString(number), '.1')), toIPv6(concat('2001:db8:', hex(number), '::1')), toUUID(concat('00000000-0000-0000-0000-0000000000', leftPad(toString(number), 2, '0'))) FROM numbers(20)
-- ;;
ALTER TABLE visits UPDATE status = 200 WHERE status = 302
-- ;;
ALTER TABLE visits DELETE WHERE isIPAddressInRange(toString(client_v4), '192.168.0.0/24') AND status = 500
-- ;;
ALTER TABLE visits ADD COLUMN subnet String MATERIALIZED IPv4NumToStringClassC(client_v4)
-- ;;
CREATE TABLE visits_by_subnet (subnet String, hits UInt64, errors UInt64) ENGINE = SummingMergeTree ORDER BY subnet
-- ;;
INSERT INTO visits_by_subnet SELECT IPv4NumToStringClassC(client_v4), count(), countIf(status >= 400) FROM visits GROUP BY 1
-- ;;
CREATE TABLE uuid_keys (id UUID, name String) ENGINE = ReplacingMergeTree ORDER BY id
-- ;;
INSERT INTO uuid_keys VALUES ('11111111-1111-1111-1111-111111111111', 'one'), ('22222222-2222-2222-2222-222222222222', 'two')
-- ;;
INSERT INTO uuid_keys VALUES ('11111111-1111-1111-1111-111111111111', 'uno')
-- ;;
INSERT INTO uuid_keys SELECT reinterpretAsUUID(reverse(unhex(lpad(hex(number), 32, '0')))), toString(number) FROM numbers(10)
-- ;;
ALTER TABLE known_hosts MODIFY COLUMN addr IPv6
-- ;;
INSERT INTO known_hosts VALUES (99, '::ffff:127.0.0.1', '::1', '99999999-9999-9999-9999-999999999999')
-- ;;
SELECT path, client_v4, client_v6 FROM visits WHERE status = 200 ORDER BY path LIMIT 5
-- ;;
ALTER TABLE visits UPDATE session_id = visit_id WHERE session_id = toUUID('00000000-0000-0000-0000-000000000000')
-- ;;
OPTIMIZE TABLE uuid_keys FINAL
-- ;;
CREATE TABLE ip_ranges (cidr String, first IPv4, last IPv4) ENGINE = MergeTree ORDER BY first
-- ;;
INSERT INTO ip_ranges SELECT c, tupleElement(IPv4CIDRToRange(toIPv4(splitByChar('/', c)[1]), toUInt8(splitByChar('/', c)[2])), 1), tupleElement(IPv4CIDRToRange(toIPv4(splitByChar('/', c)[1]), toUInt8(splitByChar('/', c)[2])), 2) FROM (SELECT arrayJoin(['10.0.0.0/8', '192.168.1.0/24', '172.16.0.0/12']) AS c)
-- ;;
ALTER TABLE visits DROP COLUMN session_id
