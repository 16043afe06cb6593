-- Purpose: the tool gave no answer after its side effect started: the outcome is unknown.
--   The call parks in outcome_unknown; only a human can approve a retry or mark it terminal.
-- Zero rows: not the owner any more, or no side effect was recorded as started (then it is
--   an ordinary failure: use fail.sql).
-- Parameters: job_id, worker_id, fencing_token, error (jsonb)
update tool_jobs
set state       = 'outcome_unknown',
    error       = :error::jsonb,
    lease_until = null
where id = :job_id::uuid
  and state in ('running', 'cancel_requested')
  and owner_id = :worker_id::text
  and fencing_token = :fencing_token::bigint
  and lease_until > now()
  and side_effect_started_at is not null
returning id, state, side_effect_started_at, external_request_id
