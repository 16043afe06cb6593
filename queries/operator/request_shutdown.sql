-- Purpose: an operator (an authority outside the subtree) asks for a drain or an abort of the
--   subtree rooted at an agent, with a window for in-flight calls; the supervisor carries it out
--   and writes the reconciliation record before anything is terminated. Runs the SECURITY DEFINER
--   function leasectl_request_shutdown (migration 0013): the request, or its refusal journaled in
--   fleet_events (with the request id taken from the transaction setting leasectl.request_id when
--   the caller set one), in one statement. With replacement_agent_id (migration 0018: an agent
--   registered to replace the root, by the same login, running, outside the subtree) the queued
--   calls move to that new generation instead of being cancelled; operators write neither table themselves. The database
--   refuses a request from an agent inside the subtree (LCF01) and an empty operator name (22023).
-- Zero rows: refused -- no such agent, it is not running (already draining, aborting,
--   terminated), or a shutdown of it, of an ancestor or of a descendant is already under way.
-- Parameters: root_agent_id, mode, requested_by, reason, window_seconds, replacement_agent_id (optional)
-- Optional: replacement_agent_id
select id, root_agent_id, mode, state, requested_by, reason, requested_at, window_seconds
from leasectl_request_shutdown(:root_agent_id::text, :mode::text, :requested_by::text, :reason::text,
                               :window_seconds::numeric, :replacement_agent_id::text)
