-- Purpose: job_events' partitions for this month and the next :ahead months (migration 0021's
--   leasectl_event_partitions_ensure), so that no month's partition is ever missing at midnight on
--   its first day: run by `leasectl migrate` and by the supervisor at each tick (cheap when they
--   exist: one catalog lookup a month).
-- Zero rows: never: one row, how many partitions it created.
-- Parameters: ahead
select leasectl_event_partitions_ensure(:ahead::integer) as created
