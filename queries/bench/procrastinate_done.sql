-- Purpose: benchmark databases only: how many procrastinate jobs succeeded (the run's check).
-- Zero rows: never.
-- Parameters: none
select count(*) as n from procrastinate_jobs where status = 'succeeded'
