-- Purpose: enqueue a tool call for an agent. The same idempotency_key twice returns the first
--   call (created = false) instead of a second one, whatever its state. Refused for an agent that
--   is registered in agents and not running (draining, aborting, reconciling, terminated): its
--   subtree is shutting down. The agent's row is share-locked, so a shutdown that starts at the
--   same moment either sees this call (and cancels it) or refuses it here.
-- Zero rows: refused -- the agent is not running.
-- Parameters: tool, idempotency_key, payload (jsonb), agent_id, session_id, deadline_at, model, provider
with agent as (
    select a.state from agents a where a.id = :agent_id::text for share
)
insert into tool_jobs (tool, idempotency_key, payload, agent_id, session_id, deadline_at, model, provider)
select :tool::text, :idempotency_key::text, :payload::jsonb, :agent_id::text, :session_id::text,
       :deadline_at::timestamptz, :model::text, :provider::text
where not exists (select 1 from agent where agent.state <> 'running')
-- a no-op update rather than DO NOTHING: it returns the existing row even when a concurrent
-- enqueue of the same key commits while we wait
on conflict (idempotency_key) do update set idempotency_key = excluded.idempotency_key
returning id, state, fencing_token, tool, payload_hash, (xmax = 0) as created
