-- Purpose: benchmark databases only (tests/bench/rules.py): the leases written without their bounds
--   (check tool_jobs_lease_bounded: finite, within a day, the deadline and the hold), to weigh
--   what it costs a call.
-- Zero rows: always.
-- Parameters: none
alter table public.tool_jobs drop constraint tool_jobs_lease_bounded
