-- Purpose: what still stands between a shutdown and its reconciliation record: the subtree's
--   live calls by state, and its agents that have not confirmed they stopped.
-- Zero rows: never (one row of counts).
-- Parameters: root_agent_id
with tree as (
    select agent_id from leasectl_subtree(:root_agent_id::text)
)
select
    (select count(*) from tool_jobs j join tree on tree.agent_id = j.agent_id
     where j.state = 'queued') as queued,
    (select count(*) from tool_jobs j join tree on tree.agent_id = j.agent_id
     where j.state = 'running') as running,
    (select count(*) from tool_jobs j join tree on tree.agent_id = j.agent_id
     where j.state = 'cancel_requested') as cancel_requested,
    (select count(*) from agents a join tree on tree.agent_id = a.id) as agents,
    (select count(*) from agents a join tree on tree.agent_id = a.id
     where a.terminated_confirmed_at is null) as unconfirmed
