-- Purpose: the shutdowns the control plane still has to carry out, oldest request first.
-- Zero rows: no shutdown is under way.
-- Parameters: none
select id, root_agent_id, mode, state, requested_at
from shutdowns
where state in ('requested', 'draining', 'aborting', 'reconciling')  -- a proposal waits for a human
order by requested_at, id
