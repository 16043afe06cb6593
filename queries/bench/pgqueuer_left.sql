-- Purpose: benchmark databases only: how many pgqueuer jobs are still in its queue (the run's
--   check: drained means none).
-- Zero rows: never.
-- Parameters: none
select count(*) as n from pgqueuer
