-- Purpose: benchmark databases only (tests/bench/audit.py): the write path's share of job_events,
--   `count` rows of the kinds every call writes (claimed, state_changed -- none of them an operator
--   kind), inserted by the owner with the database's own `at` and db_role, as the triggers do.
-- Zero rows: always.
-- Parameters: count
insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
                        lease_until, details)
select md5('write:' || g)::uuid, case when g % 2 = 0 then 'claimed' else 'state_changed' end, 'w-' || (g % 64),
       1, 'queued', 'running', null, 'w-' || (g % 64), now() + interval '60 seconds',
       jsonb_build_object('attempt', 1, 'previous_token', 0)
from generate_series(1, :count::integer) as g
