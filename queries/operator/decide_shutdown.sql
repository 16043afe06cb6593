-- Purpose: an operator (or the control plane) accepts a proposed shutdown -- it becomes requested,
--   and the supervisor carries it out -- or declines it. Runs the SECURITY DEFINER function
--   leasectl_decide_shutdown (migration 0018): the decision, with the operator's name, reason and
--   request id (leasectl.request_id), journaled in fleet_events as shutdown_accepted or
--   shutdown_declined in the same statement. An accept may set the window (null keeps the
--   proposal's). An empty name or reason is refused (22023).
-- Zero rows: no such shutdown, or it is not proposed (accepted or declined already, by anyone).
-- Parameters: shutdown_id, operator, accept, reason, window_seconds (optional: null keeps the proposal's)
-- Optional: window_seconds
select id, root_agent_id, mode, state, requested_by, reason, decided_by, decided_at,
       window_seconds::float8 as window_seconds
from leasectl_decide_shutdown(:shutdown_id::uuid, :operator::text, :accept::boolean, :reason::text,
                              :window_seconds::numeric)
