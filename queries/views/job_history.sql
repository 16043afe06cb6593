-- Purpose: the whole history of one call, oldest first: ownership grants (who, which token,
--   which lease), state changes, side effects, worker events, operator actions with name,
--   reason and request id, applied or refused; db_role is the login that wrote each row (null
--   before migration 0005), beside the actor it named.
-- Zero rows: no such call (or a call from before history was kept).
-- Parameters: job_id
select id, job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
       lease_until, reason, request_id, details, db_role
from job_events
where job_id = :job_id::uuid
order by id
