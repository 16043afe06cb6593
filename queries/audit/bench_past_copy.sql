-- Purpose: benchmark databases only (tests/bench/audit.py): COPY the calls audit/jobs_at.sql
--   rebuilt into bench_past (audit/bench_past_keep.sql), one row per call, columns in its order.
-- Zero rows: always (COPY).
-- Parameters: none
copy bench_past from stdin
