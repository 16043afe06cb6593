-- Purpose: a runaway agent's queued searches (the screenshots' bulk operation: console/operator/tui/
--   pictures.py), enqueued as plain rows of the scenario's web_search tool for agent runaway-7,
--   keys runaway-7:search:1 .. N.
-- Zero rows: always (an INSERT without RETURNING).
-- Parameters: calls (how many)
insert into tool_jobs (idempotency_key, payload, tool, agent_id)
select 'runaway-7:search:' || n, jsonb_build_object('q', 'status of vendor ' || n), 'web_search', 'runaway-7'
from generate_series(1, :calls::integer) n
