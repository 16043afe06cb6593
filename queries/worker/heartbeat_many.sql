-- Purpose: extend, in one statement, the leases of every call this worker process holds
--   (job_ids[i] under fencing_tokens[i]), and tell it for each whether a cancel was requested:
--   heartbeat.sql for many calls at once. Each lease is renewed under exactly heartbeat.sql's
--   guard (same owner, same token, live lease, running or cancel_requested), so a call this
--   worker lost is simply not renewed, whatever the others do. Only lease_until and
--   heartbeat_at change: the update stays HOT and fires no trigger, and under row level
--   security a leasectl_worker login renews only calls it owns.
-- Zero rows: every one of these leases is lost. A call missing from the answer has lost its
--   lease (expired, reclaimed, cancelled, finished or fenced by an operator): that call stops,
--   starts nothing new and writes no result; the others carry on.
-- Parameters: job_ids (uuid[]), worker_id, fencing_tokens (bigint[], in the order of job_ids)
update tool_jobs j
set lease_until  = least(now() + t.lease_seconds * interval '1 second', j.deadline_at, j.hold_until),
    heartbeat_at = now()
from unnest(:job_ids::uuid[], :fencing_tokens::bigint[]) as held (id, fencing_token),
     tools t
where j.id = held.id
  and j.fencing_token = held.fencing_token
  and t.name = j.tool
  and j.state in ('running', 'cancel_requested')
  and j.owner_id = :worker_id::text
  and j.lease_until > now()
returning j.id, j.lease_until, j.state = 'cancel_requested' as cancel_requested, j.state, j.deadline_at,
          now() as db_now
