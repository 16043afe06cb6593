-- Purpose: `leasectl audit export --fleet --format jsonl`: every fleet_events row in the range --
--   drains and aborts requested or refused, shutdown and agent state changes, grants revoked, and
--   whatever else the fleet journal holds -- oldest first (in id order: the order they were
--   appended), each as one line of typed JSON built by the server, keys id, at, kind, actor,
--   agent_id, shutdown_id, grant_id, reason, request_id, db_role, details in that order (json, not
--   jsonb: the order is kept). db_role is the login that wrote the row (null before migration
--   0005); details stays an object; times are ISO 8601 in UTC. Read through a server-side cursor.
-- Zero rows: nothing in the range.
-- Parameters: since, until
select json_build_object('id', f.id,
                         'at', to_char(f.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                         'kind', f.kind, 'actor', f.actor, 'agent_id', f.agent_id, 'shutdown_id', f.shutdown_id,
                         'grant_id', f.grant_id, 'reason', f.reason, 'request_id', f.request_id,
                         'db_role', f.db_role, 'details', f.details)::text as line
from fleet_events f
where (:since::timestamptz is null or f.at >= :since::timestamptz)
  and (:until::timestamptz is null or f.at <= :until::timestamptz)
order by f.id
