-- Purpose: `leasectl admin retention`: the months with rows waiting in job_events_default (rows
--   whose month had no partition in time, migration 0021) that ended at or before :cutoff: each
--   gets its partition (admin/create_event_partition.sql) before the months are archived, so
--   that no old row stays behind in the default partition.
-- Zero rows: the default partition holds nothing that old (the expected case).
-- Parameters: cutoff
select distinct (date_trunc('month', d.at at time zone 'UTC'))::date as month
from job_events_default d
where d.at < :cutoff::timestamptz
order by 1
