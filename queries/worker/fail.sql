-- Purpose: report a failure. A retryable failure with attempts and deadline left goes back to
--   queued (no owner); anything else fails for good with a terminal_reason. Except: a call of a
--   mutating_unverifiable tool whose side effect started is never requeued (the next claim
--   would send the request again, with no human asked): a retryable failure of it goes to
--   outcome_unknown instead, keeping its owner, and waits for a human (the database refuses the
--   requeue itself, LCS07). Every decision reads the row being updated (the latest version),
--   so a cancel request that lands at the same moment is seen. No retry either when too little
--   time is left before the deadline (tools.min_time_left_seconds) or the chain has a cancel
--   request (migration 0014). A mutating_verifiable call whose request went out unchecked ends in
--   outcome_unknown, not failed (the database turns it: a human decides).
-- Zero rows: not the owner any more; the failure is not recorded on the call.
-- Parameters: job_id, worker_id, fencing_token, error (jsonb), retryable (boolean)
update tool_jobs j
set state = case
        when :retryable::boolean and j.state = 'running'
             and j.attempt < t.max_attempts + j.extra_attempts
             and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
             and not leasectl_chain_cancelled(j.chain_id)
            then case when t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null
                      then 'outcome_unknown' else 'queued' end
        else 'failed' end,
    owner_id = case
        when :retryable::boolean and j.state = 'running'
             and j.attempt < t.max_attempts + j.extra_attempts
             and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
             and not leasectl_chain_cancelled(j.chain_id)
             and not (t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null)
            then null
        else j.owner_id end,
    terminal_reason = case
        when not :retryable::boolean then 'failed: not retryable'
        when j.state = 'cancel_requested' then 'failed after a cancel request'
        when j.attempt >= t.max_attempts + j.extra_attempts then 'attempts exhausted'
        when j.deadline_at <= now() then 'deadline passed'
        when j.deadline_at <= now() + t.min_time_left_seconds * interval '1 second'
            then 'not enough time left before the deadline for another attempt'
        when leasectl_chain_cancelled(j.chain_id) then 'failed; no retry: its chain has a cancel request'
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
