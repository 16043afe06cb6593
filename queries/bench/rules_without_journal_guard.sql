-- Purpose: benchmark databases only (tests/bench/rules.py): the history written without its guard
--   (leasectl_job_events_kind_guard: its time, role and bounds, who may write which kind), to
--   weigh what it costs a call.
-- Zero rows: always.
-- Parameters: none
drop trigger job_events_kind_guard on public.job_events
