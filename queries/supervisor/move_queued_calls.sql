-- Purpose: the upgrade path (drain, reconcile, restart): a shutdown that names a replacement agent
--   moves its subtree's queued calls to the new generation instead of cancelling them -- each to
--   the replacement's running agent of the same kind at the same depth (the root's calls to the
--   replacement itself). Runs the SECURITY DEFINER function leasectl_move_queued_calls (migration
--   0018), which journals each move (fleet_events call_moved) or why a call stays to be cancelled
--   (call_not_moved: its chain has a cancel request, or there is no agent to take it). Run it
--   before subtree_cancel_queued.sql in the same transaction. Rows locked by someone else are
--   left for the next tick.
-- Zero rows: the shutdown names no replacement, is not under way, or its subtree has no queued call.
-- Parameters: shutdown_id
select job_id, tool, from_agent_id, to_agent_id, why_not
from leasectl_move_queued_calls(:shutdown_id::uuid)
