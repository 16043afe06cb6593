-- Purpose: how many job_events rows `leasectl audit export` will write for this range (read in
--   the export's own snapshot, so the count and the rows agree), and the first and last instant.
--   The CLI filters by since, until and job_id; the Audit screen's export also by owner (the
--   events that gave the call to that worker, took it from it or were reported by it), operator
--   and kind -- the filter on screen. Each null means no filter.
-- Zero rows: never (one row; events = 0 when the range is empty).
-- Parameters: since, until, job_id, owner, operator, kind
select count(*)::bigint as events, min(e.at) as first_at, max(e.at) as last_at
from job_events e
where (:since::timestamptz is null or e.at >= :since::timestamptz)
  and (:until::timestamptz is null or e.at <= :until::timestamptz)
  and (:job_id::uuid is null or e.job_id = :job_id::uuid)
  and (:owner::text is null or e.owner_to = :owner::text or e.owner_from = :owner::text
       or e.actor = :owner::text)
  and (:operator::text is null
       or (e.kind in ('operator_cancel', 'operator_mark_terminal', 'operator_approve_retry',
                      'operator_action_failed')
           and e.actor = :operator::text))
  and (:kind::text is null or e.kind = :kind::text)
