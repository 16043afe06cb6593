-- Purpose: `leasectl audit verify`, the other half: every call's current state, owner and token,
--   in id order (the order of verify_events.sql), so that the end of each replayed history can be
--   held against the row it should have produced -- a change made with the triggers disabled has
--   no event, and only the row still shows it. With since, only the calls verify_events.sql reads.
--   created_at tells a call whose history begins in the archive (created before the online
--   history begins, console/core/history.py) from one whose history lost its first events.
-- Zero rows: no calls (or none with an event since that instant).
-- Parameters: since
select j.id, j.state, j.owner_id, j.fencing_token, j.created_at
from tool_jobs j
where :since::timestamptz is null
   or j.id in (select s.job_id from job_events s where s.at >= :since::timestamptz)
order by j.id
