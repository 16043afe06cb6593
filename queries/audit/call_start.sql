-- Purpose: where one call's online history starts, for the rule of console/core/history.py: the
--   call's created_at (it never changes: LCS05) and its first online event (id, kind, at). Its
--   history is whole online when that event is its `enqueued`; a call created before the online
--   history begins (leasectl_archived_before()) whose first online event is another has its first
--   events in the archive. Served by job_events_job_idx (job_id, id).
-- Zero rows: no such call.
-- Parameters: job_id
select j.id, j.created_at, e.id as first_event_id, e.kind as first_kind, e.at as first_at
from tool_jobs j
left join lateral (
    select f.id, f.kind, f.at
    from job_events f
    where f.job_id = j.id
    order by f.id
    limit 1
) e on true
where j.id = :job_id::uuid
