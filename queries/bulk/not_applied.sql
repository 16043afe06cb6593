-- Purpose: the calls of a bulk operation that were not applied -- refused (the call changed since
--   the plan read it, or its guard said no), failed (never reached its guard: a row lock, a
--   statement timeout), skipped (the plan could not send it) -- in the order they were worked, with
--   why and the request id their journal row carries; up to `limit`.
-- Zero rows: every call settled so far was applied.
-- Parameters: operation_id, limit
select c.job_id, c.outcome, c.why, c.seen_state, c.seen_token, c.request_id, c.settled_at, c.worked_by
from bulk_operation_calls c
where c.operation_id = :operation_id::uuid and c.outcome in ('refused', 'failed', 'skipped')
order by c.ordinal
limit :limit::integer
