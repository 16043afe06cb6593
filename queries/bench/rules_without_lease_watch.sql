-- Purpose: benchmark databases only (tests/bench/rules.py): the leases written without the lease
--   watch's trigger (tool_jobs_lease_watch_update: its WHEN clause, planned again for each
--   statement), to weigh what it costs a call.
-- Zero rows: always.
-- Parameters: none
drop trigger tool_jobs_lease_watch_update on public.tool_jobs
