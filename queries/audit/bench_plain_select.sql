-- Purpose: benchmark databases only (tests/bench/audit.py): the rows `audit export` writes, read
--   plainly -- the same range and order, no JSON, no formatting -- through the same server-side
--   cursor, as the ceiling the export is compared with in the same run.
-- Zero rows: nothing in the range.
-- Parameters: since, until
select e.id, e.job_id, e.at, e.kind, e.actor, e.fencing_token, e.state_from, e.state_to, e.owner_from, e.owner_to,
       e.lease_until, e.details
from job_events e
where (:since::timestamptz is null or e.at >= :since::timestamptz)
  and (:until::timestamptz is null or e.at <= :until::timestamptz)
order by e.id
