-- Purpose: benchmark databases only: how many calls succeeded, and how many history rows the
--   database wrote for them (the run's check: history by trigger is part of what is measured).
-- Zero rows: never.
-- Parameters: none
select (select count(*) from tool_jobs where state = 'succeeded') as n,
       (select count(*) from job_events) as events
