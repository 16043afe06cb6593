-- Purpose: an agent says it is alive and learns its state: a child learns here that its
--   subtree is draining or aborting (take no new work; finish or cancel; then confirm with
--   confirm_terminated.sql).
-- Zero rows: no such agent (it was never registered).
-- Parameters: agent_id
update agents
set last_seen_at = now()
where id = :agent_id::text
returning id, state, state <> 'running' as shutting_down
