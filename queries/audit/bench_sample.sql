-- Purpose: benchmark databases only (tests/bench/audit.py): a reproducible sample of calls with
--   their first and last instants, to ask "who held it at T" about.
-- Zero rows: no calls.
-- Parameters: count
select j.id, j.created_at, j.finished_at
from tool_jobs j
order by md5(j.id::text)
limit :count::integer
