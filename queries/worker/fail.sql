-- Purpose: report a failure. A retryable failure with attempts and deadline left goes back to
--   queued (no owner); anything else fails for good with a terminal_reason.
-- Zero rows: not the owner any more; the failure is not recorded on the call.
-- Parameters: job_id, worker_id, fencing_token, error (jsonb), retryable (boolean)
update tool_jobs j
set state = case
        when :retryable::boolean and j.state = 'running'
             and j.attempt < t.max_attempts + j.extra_attempts
             and (j.deadline_at is null or j.deadline_at > now()) then 'queued'
        else 'failed' end,
    owner_id = case
        when :retryable::boolean and j.state = 'running'
             and j.attempt < t.max_attempts + j.extra_attempts
             and (j.deadline_at is null or j.deadline_at > now()) then null
        else j.owner_id end,
    terminal_reason = case
        when not :retryable::boolean then 'failed: not retryable'
        when j.state = 'cancel_requested' then 'failed after a cancel request'
        when j.attempt >= t.max_attempts + j.extra_attempts then 'attempts exhausted'
        when j.deadline_at <= now() then 'deadline passed'
        else null end,
    error       = :error::jsonb,
    lease_until = null
from tools t
where j.id = :job_id::uuid
  and t.name = j.tool
  and j.state in ('running', 'cancel_requested')
  and j.owner_id = :worker_id::text
  and j.fencing_token = :fencing_token::bigint
  and j.lease_until > now()
returning j.id, j.state, j.attempt, j.terminal_reason
