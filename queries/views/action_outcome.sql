-- Purpose: what the journal says about one operator action, by its request id: why it was
--   refused, and what was true at that moment.
-- Zero rows: no such action was journaled (it never reached the database).
-- Parameters: request_id
select kind, actor, details ->> 'outcome' as outcome, details ->> 'refusal' as refusal,
       state_from, fencing_token, owner_from, at
from job_events
where request_id = :request_id::uuid
order by id desc
limit 1
