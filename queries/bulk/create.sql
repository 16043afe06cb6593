-- Purpose: start a bulk operation (migration 0023): the operation and its calls, frozen as the
--   plan read them in one snapshot and the operator confirmed them -- each call with the state and
--   fencing token read for it, the guard its action is sent with whenever its batch comes -- and the
--   calls the plan skipped, each with why. Journaled as fleet_events bulk_started (with the request
--   id of leasectl.request_id when set). Done by the SECURITY DEFINER function
--   leasectl_bulk_create: only an operator login may start one (a worker or auditor login, or a
--   read-only session, is refused); nobody writes the tables directly.
-- Zero rows: never (one row: the operation as started, state running).
-- Parameters: action, filter (the --where text, or null for marked calls), choices (jsonb),
--   operator, reason, background, job_ids, seen_states, seen_tokens (the calls to send, in order),
--   skipped_ids, skipped_states, skipped_tokens, skipped_why (the calls skipped; empty arrays for none)
select *
from leasectl_bulk_create(:action::text, :filter::text, :choices::jsonb, :operator::text, :reason::text,
                          :background::boolean, :job_ids::uuid[], :seen_states::text[], :seen_tokens::bigint[],
                          :skipped_ids::uuid[], :skipped_states::text[], :skipped_tokens::bigint[],
                          :skipped_why::text[])
