-- Purpose: benchmark databases only (tests/bench/audit.py): COPY the calls `leasectl jobs --at
--   --json` wrote into bench_past (audit/bench_past_keep.sql): their order, then the JSON object.
-- Zero rows: always (COPY).
-- Parameters: none
copy bench_past (n, line) from stdin
