-- Purpose: benchmark databases only: how many bare seed calls finished (the run's check).
-- Zero rows: never.
-- Parameters: none
select count(*) filter (where state = 'succeeded') as n from bare_jobs
