-- Purpose: why a fleet request was refused, read back from the journal by its request id.
-- Zero rows: nothing was journaled under that request id (the agent does not exist).
-- Parameters: request_id
select e.kind, e.agent_id, e.details ->> 'refusal' as refusal, e.details ->> 'agent_state' as agent_state
from fleet_events e
where e.request_id = :request_id::uuid
  and e.kind = 'shutdown_refused'
order by e.id desc
limit 1
