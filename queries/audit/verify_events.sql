-- Purpose: `leasectl audit verify`: every call's whole history, call after call, each in id order
--   (the order its row lock let the changes happen), with only what the replay needs; with since,
--   only the calls that have an event at or after it (each still replayed from its first event,
--   so every check is made on the whole story). Read through a server-side cursor over
--   job_events_job_idx (job_id, id): one call at a time in memory. db_role (the login that wrote
--   each event) is held against its kind (audit/verify_logins.sql says which logins are workers').
--   An infinite lease (no longer writable since migration 0013, but history keeps what was written)
--   is read as null and flagged, so that one row cannot stop the whole verification.
-- Zero rows: no history (or none since that instant).
-- Parameters: since
select e.id, e.job_id, e.at, e.kind, e.fencing_token, e.state_from, e.state_to, e.owner_from, e.owner_to,
       case when isfinite(e.lease_until) then e.lease_until end as lease_until,
       e.details ->> 'previous_lease_until' as previous_lease_until, e.actor, e.db_role,
       not isfinite(e.lease_until) as infinite_lease
from job_events e
where :since::timestamptz is null
   or e.job_id in (select s.job_id from job_events s where s.at >= :since::timestamptz)
order by e.job_id, e.id
