-- Purpose: commit the result of a call, only if this worker and token still own it.
--   Finishing after a cancel request is recorded as completed_despite_cancel (by trigger).
-- Zero rows: the result is rejected (the lease was lost). Log it; never report it as done.
-- Parameters: job_id, worker_id, fencing_token, result (jsonb)
update tool_jobs
set state       = 'succeeded',
    result      = :result::jsonb,
    lease_until = null
where id = :job_id::uuid
  and state in ('running', 'cancel_requested')
  and owner_id = :worker_id::text
  and fencing_token = :fencing_token::bigint
  and lease_until > now()
returning id, state, completed_despite_cancel, finished_at
