-- Purpose: the worker confirms it stopped after a cancel request: cancel_requested -> cancelled.
--   Cancel is not rollback: whatever the tool did before stopping stays done.
-- Zero rows: no cancel is pending for this owner and token (not requested, or the lease is lost).
-- Parameters: job_id, worker_id, fencing_token
update tool_jobs
set state           = 'cancelled',
    lease_until     = null,
    terminal_reason = 'cancel confirmed by the worker'
where id = :job_id::uuid
  and state = 'cancel_requested'
  and owner_id = :worker_id::text
  and fencing_token = :fencing_token::bigint
  and lease_until > now()
returning id, state, finished_at
