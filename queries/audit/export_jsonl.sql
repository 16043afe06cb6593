-- Purpose: `leasectl audit export --format jsonl`: every job_events row in the range, oldest first
--   (in id order: the order they were appended), each as one line of typed JSON built by the
--   server -- keys id, job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from,
--   owner_to, lease_until, details (the contract's, in that order), then reason, request_id and
--   db_role (an operator's reason and request; the login that wrote the row, null before
--   migration 0005) -- json, not jsonb: the order is kept. Numbers stay numbers, details stays an
--   object, times are ISO 8601 in UTC. Read through a server-side cursor: the client holds one
--   batch at a time. Filters as in audit/export_count.sql (each null means no filter).
-- Zero rows: nothing in the range.
-- Parameters: since, until, job_id, owner, operator, kind
select json_build_object('id', e.id, 'job_id', e.job_id,
                         'at', to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                         'kind', e.kind, 'actor', e.actor, 'fencing_token', e.fencing_token,
                         'state_from', e.state_from, 'state_to', e.state_to, 'owner_from', e.owner_from,
                         'owner_to', e.owner_to,
                         'lease_until', to_char(e.lease_until at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                         'details', e.details, 'reason', e.reason, 'request_id', e.request_id,
                         'db_role', e.db_role)::text as line
from job_events e
where leasectl_audit_event_matches(e.job_id, e.at, e.kind, e.actor, e.owner_from, e.owner_to,
                                   :job_id::uuid, :since::timestamptz, :until::timestamptz,
                                   :owner::text, :operator::text, :kind::text)
order by e.id
