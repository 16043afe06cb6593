-- Purpose: after a heartbeat met a locked row (lock_timeout): which of these leases' rows, still
--   this worker's, another transaction holds this instant -- found without waiting for any lock
--   (SKIP LOCKED), so that every other lease is renewed at once in one statement and only a call
--   whose row is held waits for it. The row locks the probe takes end with the statement (the
--   worker's connections run in autocommit). A row that is no longer this worker's is not listed:
--   the renewal itself says that lease is lost.
-- Zero rows: none of them is locked by another transaction.
-- Parameters: job_ids, worker_id
with asked as (
    select unnest(:job_ids::uuid[]) as id
),
free as (
    select j.id
    from tool_jobs j
    where j.id in (select a.id from asked a)
      and j.owner_id = :worker_id::text
    for no key update skip locked
)
select j.id
from tool_jobs j
where j.id in (select a.id from asked a)
  and j.owner_id = :worker_id::text
  and j.id not in (select f.id from free f)
