-- Purpose: the Audit screen's events: job_events across every call, newest first, one keyset page
--   (before_id: the smallest id of the page above; null for the first page). owner: the events
--   that gave the call to that worker, took it from it, or were reported by it; operator: that
--   operator's actions; kind: one event kind; since / until: by `at`. Filters combine; each null
--   means no filter (leasectl_audit_event_matches, migrations/0019_audit_rules.sql: the export's
--   filter too). Served by the primary key (newest first) or job_events_job_idx (one call).
-- Zero rows: nothing matches (or no more pages).
-- Parameters: job_id, owner, operator, kind, since, until, before_id, limit
select e.id, e.job_id, e.at, e.kind, e.actor, e.fencing_token, e.state_from, e.state_to, e.owner_from,
       e.owner_to, e.lease_until, e.reason, e.request_id, e.details, e.db_role
from job_events e
where leasectl_audit_event_matches(e.job_id, e.at, e.kind, e.actor, e.owner_from, e.owner_to,
                                   :job_id::uuid, :since::timestamptz, :until::timestamptz,
                                   :owner::text, :operator::text, :kind::text)
  and (:before_id::bigint is null or e.id < :before_id::bigint)
order by e.id desc
limit :limit::integer
