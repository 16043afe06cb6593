-- Purpose: benchmark databases only: add `count` queued calls to the bare seed table.
-- Zero rows: always.
-- Parameters: count
insert into bare_jobs (id, state, idempotency_key, payload)
select gen_random_uuid(), 'queued', 'bare-' || g, '{}'::jsonb
from generate_series(1, :count::integer) as g
