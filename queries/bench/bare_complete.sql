-- Purpose: benchmark databases only: the seed's fenced final write, verbatim but for the table
--   name (docs/seeds.md §000): the result lands only if this worker still owns the call under this token.
-- Zero rows: the result is rejected (the lease was lost).
-- Parameters: job_id, worker_id, fencing_token, result
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
