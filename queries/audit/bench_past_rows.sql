-- Purpose: benchmark databases only (tests/bench/audit.py): the calls audit/jobs_at.sql rebuilt,
--   read back as they were stored -- the same rows, columns and order, no rebuild -- as the
--   ceiling of delivering and validating that many rows.
-- Zero rows: bench_past is empty.
-- Parameters: none
select * from bench_past order by created_at desc, id desc
