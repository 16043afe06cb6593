-- Purpose: benchmark databases only (tests/bench/rules.py): the calls changed without their guard
--   (leasectl_tool_jobs_guard as trigger tool_jobs_guard_update: the state machine, the claim's
--   and the completion's fast paths), to weigh what it costs a call.
-- Zero rows: always.
-- Parameters: none
drop trigger tool_jobs_guard_update on public.tool_jobs
