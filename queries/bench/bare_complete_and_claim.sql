-- Purpose: benchmark databases only: the seed's fenced final write and the seed's claim, fused
--   in one statement (one commit per call) exactly as the reference worker fuses
--   worker/complete.sql and worker/claim.sql in worker/complete_and_claim.sql, so that the
--   benchmark compares like with like: what leasectl adds is everything else.
-- Zero rows: never. One row: completed (false = rejected), then the next call (nulls: none left).
-- Parameters: job_id, worker_id, fencing_token, result
with completed as (
  update bare_jobs
  set state = 'succeeded',
      result = :result::jsonb,
      lease_until = null
  where id = :job_id::uuid
    and state = 'running'
    and owner_id = :worker_id::text
    and fencing_token = :fencing_token::bigint
    and lease_until > now()
  returning id
),
candidate as (
  select id
  from bare_jobs
  where state = 'queued'
     or (state = 'running' and lease_until < now())
  order by id
  for update skip locked
  limit 1
),
claimed as (
  update bare_jobs j
  set state = 'running',
      owner_id = :worker_id::text,
      lease_until = now() + interval '90 seconds',
      heartbeat_at = now(),
      fencing_token = j.fencing_token + 1,
      attempt = j.attempt + 1
  from candidate
  where j.id = candidate.id
  returning j.id, j.payload, j.fencing_token, j.lease_until
)
select exists (select 1 from completed) as completed, n.*
from (select 1) as one
left join claimed n on true
