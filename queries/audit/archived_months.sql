-- Purpose: `leasectl audit verify --archive DIR`: every month retention archived, oldest first,
--   as job_events_archive registered it when the month was dropped (its bounds, rows, first and
--   last id, and the sha256 and name of its file): what the archive directory is held against.
-- Zero rows: nothing was archived.
-- Parameters: none
select a.month, a.range_from, a.range_to, a.rows, a.first_id, a.last_id, a.sha256, a.file, a.archived_at,
       a.archived_by
from job_events_archive a
order by a.month
