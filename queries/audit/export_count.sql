-- Purpose: how many job_events rows `leasectl audit export` will write for this range (read in
--   the export's own snapshot, so the count and the rows agree), and the first and last instant.
--   The CLI filters by since, until and job_id; the Audit screen's export also by owner (the
--   events that gave the call to that worker, took it from it or were reported by it), operator
--   and kind -- the filter on screen, leasectl_audit_event_matches (migrations/0019_audit_rules.sql),
--   as audit/events_page.sql pages it. Each null means no filter.
-- Zero rows: never (one row; events = 0 when the range is empty).
-- Parameters: since, until, job_id, owner, operator, kind
select count(*)::bigint as events, min(e.at) as first_at, max(e.at) as last_at
from job_events e
where leasectl_audit_event_matches(e.job_id, e.at, e.kind, e.actor, e.owner_from, e.owner_to,
                                   :job_id::uuid, :since::timestamptz, :until::timestamptz,
                                   :owner::text, :operator::text, :kind::text)
