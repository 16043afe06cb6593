-- Purpose: an operator cancels a call, guarded by the state and token they saw.
--   queued -> cancelled (it never started); running -> cancel_requested (NOT stopped: the
--   worker hears it at its next heartbeat and confirms; until then it may still be running).
--   The action is journaled in job_events (kind operator_cancel, outcome applied or refused)
--   in this same statement, with the operator, the reason, the database role (db_role), a
--   request id (taken from the transaction setting leasectl.request_id when the caller set one)
--   and a batch id (details.batch_id, from leasectl.batch_id when set). The work is done by the
--   SECURITY DEFINER function leasectl_request_cancel (migration 0005): operators have no
--   direct UPDATE on tool_jobs, so an action without its journal row cannot happen.
-- Zero rows: refused -- the call changed since you looked (state or token differ) or is in a
--   state that cannot be cancelled. The refusal is journaled. No such call: nothing journaled.
-- Parameters: job_id, seen_state, seen_token, operator, reason
select job_id, state, fencing_token, owner_id, lease_until, cancel_requested_at, request_id
from leasectl_request_cancel(:job_id::uuid, :seen_state::text, :seen_token::bigint, :operator::text,
                             :reason::text)
