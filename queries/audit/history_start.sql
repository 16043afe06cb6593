-- Purpose: where the online history begins, for every audit answer (console/core/history.py):
--   archived_before is leasectl_archived_before() (migration 0021: the end of the latest month
--   retention archived; null when nothing was), and what the archive holds before it -- how many
--   months, the first and the last, and their files -- as job_events_archive registered them.
--   Every job_events row dated before archived_before is in those files, none is in the table.
-- Zero rows: never (one row; archived_before null and months 0 when nothing was archived).
-- Parameters: none
select leasectl_archived_before() as archived_before, count(*)::integer as months,
       min(a.month) as first_month, max(a.month) as last_month,
       (array_agg(a.file order by a.month))[1] as first_file,
       (array_agg(a.file order by a.month desc))[1] as last_file
from job_events_archive a
