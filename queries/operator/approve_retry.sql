-- Purpose: a human approves one more attempt of a call whose outcome is unknown:
--   outcome_unknown -> queued, with retry_approved_by/at/reason and room for exactly one more
--   attempt. The executor (the call's last owner or its agent) can never approve its own retry.
--   The side-effect mark is cleared for the new attempt; job_events keeps the old one, and
--   external_request_id stays so the next owner sees which request may already have run.
--   Journaled in this statement (kind operator_approve_retry), applied or refused, with the
--   request id (leasectl.request_id) and batch id (leasectl.batch_id) when the caller set them.
--   Done by the SECURITY DEFINER function leasectl_approve_retry (migration 0005): the database
--   refuses an approval that has no such journal row.
-- Zero rows: refused -- the call changed since you looked, is not outcome_unknown, or you are
--   its executor. The refusal is journaled.
-- Parameters: job_id, seen_state, seen_token, operator, reason
select job_id, state, fencing_token, retry_approved_at, request_id
from leasectl_approve_retry(:job_id::uuid, :seen_state::text, :seen_token::bigint, :operator::text,
                            :reason::text)
