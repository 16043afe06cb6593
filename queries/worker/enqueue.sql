-- Purpose: enqueue a tool call for an agent. The same idempotency_key twice returns the first
--   call (created = false) instead of a second one, whatever its state, even when a concurrent
--   enqueue of the same key commits while this one waits. Refused for an agent that is
--   registered in agents and not running (draining, aborting, reconciling, terminated): its
--   subtree is shutting down. The agent's row is share-locked, so a shutdown that starts at the
--   same moment either sees this call (and cancels it) or refuses it here.
--   The upsert runs in the SECURITY DEFINER function leasectl_enqueue (migration 0005): under
--   row level security an ON CONFLICT DO UPDATE that meets another worker's call would raise
--   instead of returning it. A plain INSERT into tool_jobs still works for any worker.
--   A chain (migration 0014): with parent_id, the call is the parent's next stage -- same
--   chain_id, stage + 1, and a deadline no later than the parent's, whatever was asked (the
--   database sets these).
-- Zero rows: refused -- the agent is not running, or the parent is not running or succeeded, or
--   its chain has a cancel request (no later stage starts).
-- Parameters: tool, idempotency_key, payload (jsonb), agent_id, session_id, deadline_at, model, provider,
--   parent_id (uuid), priority (smallint, higher first), accepted_at (when the request was accepted
--   upstream; default now), trace_id (W3C trace id, 32 hex digits)
-- Optional: parent_id, priority, accepted_at, trace_id
select id, state, fencing_token, tool, payload_hash, created
from leasectl_enqueue(:tool::text, :idempotency_key::text, :payload::jsonb, :agent_id::text,
                      :session_id::text, :deadline_at::timestamptz, :model::text, :provider::text,
                      :parent_id::uuid, :priority::smallint, :accepted_at::timestamptz, :trace_id::text)
