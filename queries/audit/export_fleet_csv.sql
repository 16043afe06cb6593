-- Purpose: `leasectl audit export --fleet --format csv`: every fleet_events row in the range,
--   oldest first (in id order), as text columns id, at, kind, actor, agent_id, shutdown_id,
--   grant_id, reason, request_id, db_role, details (JSON text). Times are ISO 8601 in UTC; null is
--   an empty cell. Read through a server-side cursor: the client holds one batch at a time.
-- Zero rows: nothing in the range.
-- Parameters: since, until
select f.id::text as id, to_char(f.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at,
       f.kind, f.actor, f.agent_id, f.shutdown_id::text as shutdown_id, f.grant_id::text as grant_id, f.reason,
       f.request_id::text as request_id, f.db_role, f.details::text as details
from fleet_events f
where (:since::timestamptz is null or f.at >= :since::timestamptz)
  and (:until::timestamptz is null or f.at <= :until::timestamptz)
order by f.id
