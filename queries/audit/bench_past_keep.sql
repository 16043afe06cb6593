-- Purpose: benchmark databases only (tests/bench/audit.py): a temporary table to hold the calls
--   `leasectl jobs --at --json` wrote, one JSON object a row in its order (n), so that reading
--   them back and writing them the same way (audit/bench_past_rows.sql) measures what delivering
--   that output costs on this machine without the rebuild: the ceiling `jobs --at` is compared
--   with in the same run. Filled by COPY (audit/bench_past_copy.sql).
-- Zero rows: always (DDL).
-- Parameters: none
create temporary table if not exists bench_past (n integer, line text)
