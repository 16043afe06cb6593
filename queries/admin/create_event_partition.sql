-- Purpose: the partition of job_events for one month (migration 0021's
--   leasectl_event_partition_create: created empty, or holding that month's rows taken from the
--   default partition). The schema owner's.
-- Zero rows: never: one row, whether it created the partition (false: it existed).
-- Parameters: month
select leasectl_event_partition_create(:month::date) as created
