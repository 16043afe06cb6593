-- Purpose: reconciliation records, newest first, with their shutdown (which subtree, drain or
--   abort, who asked and why) and how many children are unaccounted -- the most important field.
--   With record_id, just that record. Since migration 0018, the calls it moved to a new generation.
-- Zero rows: no shutdown has been reconciled yet (or no such record).
-- Parameters: record_id (or null for all), limit
select r.id, r.shutdown_id, r.written_by, r.written_at, r.in_flight, r.grants_revoked, r.grants_expired,
       r.children_confirmed, r.children_unaccounted, r.calls_moved,
       s.root_agent_id, s.replacement_agent_id, s.decided_by, s.mode, s.requested_by, s.reason, s.requested_at, s.finished_at,
       leasectl_now() as db_now
from reconciliation_records r
join shutdowns s on s.id = r.shutdown_id
where :record_id::uuid is null or r.id = :record_id::uuid
order by r.written_at desc, r.id
limit :limit::integer
