-- Purpose: enqueue a tool call for an agent. The same idempotency_key twice returns the first
--   call (created = false) instead of a second one, whatever its state.
-- Zero rows: never.
-- Parameters: tool, idempotency_key, payload (jsonb), agent_id, session_id, deadline_at, model, provider
insert into tool_jobs (tool, idempotency_key, payload, agent_id, session_id, deadline_at, model, provider)
values (:tool::text, :idempotency_key::text, :payload::jsonb, :agent_id::text, :session_id::text,
        :deadline_at::timestamptz, :model::text, :provider::text)
-- a no-op update rather than DO NOTHING: it returns the existing row even when a concurrent
-- enqueue of the same key commits while we wait
on conflict (idempotency_key) do update set idempotency_key = excluded.idempotency_key
returning id, state, fencing_token, tool, payload_hash, (xmax = 0) as created
