-- Purpose: `leasectl admin retention`, the last step for one month (migration 0021's
--   leasectl_archive_month): the month still holds what was archived and the metric rollup
--   counted it, then its partition is detached and dropped, the month registered in
--   job_events_archive and the action journaled (fleet_events history_archived), in one
--   transaction. Raises LCR01 (not what was archived), LCR02 (rollup behind), LCR03 (no such
--   month, or not ended).
-- Zero rows: never: one row, the month, its rows and where the online history now begins.
-- Parameters: month, rows, first_id, last_id, sha256, file, actor, reason
select archived_month, archived_rows, archived_before
from leasectl_archive_month(:month::date, :rows::bigint, :first_id::bigint, :last_id::bigint, :sha256::text,
                            :file::text, :actor::text, :reason::text)
