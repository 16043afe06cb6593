-- Purpose: benchmark databases only: the seed's claim, verbatim but for the table name and
--   the lease (docs/seeds.md §000): a queued call or an expired lease, SKIP LOCKED, a new fencing token.
-- Zero rows: nothing left to claim.
-- Parameters: worker_id
with candidate as (
  select id
  from bare_jobs
  where state = 'queued'
     or (state = 'running' and lease_until < now())
  order by id
  for update skip locked
  limit 1
)
update bare_jobs j
set state = 'running',
    owner_id = :worker_id::text,
    lease_until = now() + interval '90 seconds',
    heartbeat_at = now(),
    fencing_token = fencing_token + 1,
    attempt = attempt + 1
from candidate
where j.id = candidate.id
returning j.id, j.payload, j.fencing_token, j.lease_until
