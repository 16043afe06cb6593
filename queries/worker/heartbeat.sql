-- Purpose: extend the lease of a call this worker still owns, and tell it whether a cancel
--   was requested (the worker confirms with confirm_cancel.sql). The lease never runs past the
--   call's deadline_at (returned), nor past its hold (hold_until, migration 0016: claimed_at +
--   tools.max_hold_seconds): the last renewals before either give less than a full lease.
-- Zero rows: the lease is lost (expired, reclaimed, cancelled, finished or fenced by an
--   operator). Stop; do not start anything new; do not write a result.
-- Parameters: job_id, worker_id, fencing_token
update tool_jobs j
set lease_until  = least(now() + t.lease_seconds * interval '1 second', j.deadline_at, j.hold_until),
    heartbeat_at = now()
from tools t
where j.id = :job_id::uuid
  and t.name = j.tool
  and j.state in ('running', 'cancel_requested')
  and j.owner_id = :worker_id::text
  and j.fencing_token = :fencing_token::bigint
  and j.lease_until > now()
returning j.lease_until, j.state = 'cancel_requested' as cancel_requested, j.state, j.deadline_at,
          now() as db_now
