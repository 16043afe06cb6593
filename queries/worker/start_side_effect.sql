-- Purpose: record, before calling out, that a side effect is about to start and under which
--   external request id. Recorded first so that a lost answer is known to be "maybe happened".
--   Refused once a cancel was requested or the chain's deadline has passed.
-- Zero rows: do not send the request (not the owner any more, cancel requested, or too late).
-- Parameters: job_id, worker_id, fencing_token, external_request_id
update tool_jobs
set side_effect_started_at = now(),
    external_request_id    = :external_request_id::text
where id = :job_id::uuid
  and state = 'running'
  and owner_id = :worker_id::text
  and fencing_token = :fencing_token::bigint
  and lease_until > now()
  and (deadline_at is null or deadline_at > now())
returning side_effect_started_at, lease_until, idempotency_key, now() as db_now
