-- Purpose: end the sessions of worker and operator logins whose one transaction has held
--   leasectl's tables for longer than older_than_seconds (at least 5): a reference worker's transaction is one
--   statement, and a session sitting on the fleet's rows holds up heartbeats, drains and cancels
--   (migration 0015). Each one ended is journaled in fleet_events as session_ended.
-- Zero rows: no session held them that long (or the schema's owner may not see or signal other
--   sessions: leasectl doctor says so).
-- Parameters: older_than_seconds (numeric)
select pid, login, extract(epoch from held_for)::float8 as held_for_seconds, ended
from leasectl_end_lock_holders(:older_than_seconds::numeric * interval '1 second')
