-- Purpose: a call's lineage: the calls whose idempotency keys share its key's stem (the key
--   up to its last ':', e.g. every stage of report:42, every operation on payment:inv-7) and
--   the calls that sent the same external request id. What else happened to the same thing.
-- Zero rows: the call stands alone.
-- Parameters: job_id
with me as (
    select id, idempotency_key, external_request_id,
           case when position(':' in idempotency_key) > 0
                then substring(idempotency_key from '^(.*:)[^:]*$')
                else idempotency_key end as stem
    from tool_jobs
    where id = :job_id::uuid
)
select j.id, j.tool, j.state, j.idempotency_key, j.external_request_id, j.fencing_token,
       j.attempt, j.owner_id, j.created_at, j.finished_at,
       case when j.external_request_id = me.external_request_id then 'same external request'
            else 'same key stem' end as relation
from me
join tool_jobs j
  on j.id <> me.id
 and ((j.idempotency_key >= me.stem and j.idempotency_key < me.stem || chr(1114111))
      or (me.external_request_id is not null and j.external_request_id = me.external_request_id))
order by j.created_at
limit 50
