-- Purpose: benchmark databases only (tests/bench/rules.py): the calls changed without the guard of
--   settled and queued calls (trigger tool_jobs_guard_settled: its WHEN clause, planned again
--   for each statement), to weigh what it costs a call.
-- Zero rows: always.
-- Parameters: none
drop trigger tool_jobs_guard_settled on public.tool_jobs
