-- Purpose: `leasectl admin retention`: what one month of the history holds, to be held against
--   the archive file read back: its rows, first and last id (one partition: pruned by at).
-- Zero rows: never: one row (rows 0 and null ids for an empty month).
-- Parameters: range_from, range_to
select count(*) as rows, min(e.id) as first_id, max(e.id) as last_id
from job_events e
where e.at >= :range_from::timestamptz and e.at < :range_to::timestamptz
