-- Purpose: benchmark databases only (tests/bench/audit.py): the calls `leasectl jobs --at --json`
--   wrote, read back as they were stored -- the same JSON, in the same order, no rebuild -- as
--   the ceiling of delivering that output.
-- Zero rows: bench_past is empty.
-- Parameters: none
select line from bench_past order by n
