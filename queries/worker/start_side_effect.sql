-- Purpose: record, before calling out, that a side effect is about to start and under which
--   external request id. Recorded first so that a lost answer is known to be "maybe happened".
--   Refused once a cancel was requested or the chain's deadline has passed.
--   A mutating_unverifiable call sends its request once (a human's approved retry allows another).
--   A mutating_verifiable call that carries an earlier request starts no new one until a check
--   (record_check.sql) found it not_done under this token, after the last start (migration 0014).
-- Zero rows: do not send the request (not the owner any more, cancel requested, too late, or an
--   earlier request of a verifiable call not checked yet: ask the service, record_check.sql).
-- Parameters: job_id, worker_id, fencing_token, external_request_id
update tool_jobs j
set side_effect_started_at = now(),
    external_request_id    = :external_request_id::text
from tools t
where j.id = :job_id::uuid
  and t.name = j.tool
  and j.state = 'running'
  and j.owner_id = :worker_id::text
  and j.fencing_token = :fencing_token::bigint
  and j.lease_until > now()
  and (j.deadline_at is null or j.deadline_at > now())
  and not (t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null)
  and (t.side_effect <> 'mutating_verifiable' or (j.external_request_id is null and j.side_effect_started_at is null)
       or (j.check_found = 'not_done' and j.check_token = j.fencing_token
           and j.checked_at >= coalesce(j.side_effect_started_at, '-infinity')))
returning j.side_effect_started_at, j.lease_until, j.idempotency_key, now() as db_now
