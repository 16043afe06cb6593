-- Purpose: an agent proposes a drain or an abort of its own subtree (docs/seeds.md §003: "the
--   agent proposes, the control plane decides"). It becomes a shutdown in state `proposed`, which
--   nothing carries out until an operator or the control plane accepts it
--   (operator/decide_shutdown.sql, `leasectl shutdowns accept ID`). Runs the SECURITY DEFINER
--   function leasectl_propose_shutdown (migration 0018): only the login that registered the agent
--   may propose for it (LCF09); a refusal is journaled in fleet_events as an operator's is.
-- Zero rows: refused -- no such agent, it is not running, or a shutdown of it, of an ancestor or
--   of a descendant is already under way or proposed.
-- Parameters: agent_id, mode, reason
select id, root_agent_id, mode, state, requested_by, reason, requested_at, window_seconds
from leasectl_propose_shutdown(:agent_id::text, :mode::text, :reason::text)
