-- Purpose: an operator closes a call after checking outside, guarded by the state and token
--   they saw. outcome_unknown -> succeeded | failed; queued -> failed | cancelled;
--   running / cancel_requested -> succeeded | failed | cancelled.
--   A call whose owner still holds a live lease is refused unless force: forcing bumps the
--   fencing token, which fences the owner out (its heartbeat and result get zero rows).
--   Journaled in this statement (kind operator_mark_terminal), applied or refused, with the
--   request id (leasectl.request_id) and batch id (leasectl.batch_id) when the caller set them.
--   Done by the SECURITY DEFINER function leasectl_mark_terminal (migration 0005): it is the
--   only way out of outcome_unknown to a terminal state, and it journals before it changes.
-- Zero rows: refused -- the call changed since you looked, the target state is not allowed
--   from its state, or the lease is live and force was not given. The refusal is journaled.
-- Parameters: job_id, seen_state, seen_token, terminal_state, operator, reason, force
select job_id, state, fencing_token, owner_id, fenced, finished_at, request_id
from leasectl_mark_terminal(:job_id::uuid, :seen_state::text, :seen_token::bigint,
                            :terminal_state::text, :operator::text, :reason::text, :force::boolean)
