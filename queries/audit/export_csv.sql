-- Purpose: `leasectl audit export --format csv`: every job_events row in the range, oldest first
--   (in id order: the order they were appended), as text columns id, job_id, at, kind, actor,
--   fencing_token, state_from, state_to, owner_from, owner_to, lease_until, details (JSON text) --
--   the contract's -- then reason, request_id and db_role (the login that wrote the row; empty
--   before migration 0005). Times are ISO 8601 in UTC; null is an empty cell. Read through a
--   server-side cursor: the client holds one batch at a time.
--   Filters as in audit/export_count.sql (each null means no filter).
-- Zero rows: nothing in the range.
-- Parameters: since, until, job_id, owner, operator, kind
select e.id::text as id, e.job_id::text as job_id,
       to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at,
       e.kind, e.actor, e.fencing_token::text as fencing_token, e.state_from, e.state_to, e.owner_from,
       e.owner_to, to_char(e.lease_until at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as lease_until,
       e.details::text as details, e.reason, e.request_id::text as request_id, e.db_role
from job_events e
where leasectl_audit_event_matches(e.job_id, e.at, e.kind, e.actor, e.owner_from, e.owner_to,
                                   :job_id::uuid, :since::timestamptz, :until::timestamptz,
                                   :owner::text, :operator::text, :kind::text)
order by e.id
