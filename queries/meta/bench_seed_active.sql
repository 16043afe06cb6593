-- Purpose: benchmark databases only: add `count` live calls with a realistic mix of lease
--   health (mostly healthy; some late heartbeats, expired leases, unheard cancels, outcome
--   unknown), written in exact mode. Healthy ones are stamped ahead of time so the mix stays
--   the same for the length of a benchmark run (nobody heartbeats them).
-- Zero rows: always.
-- Parameters: count
insert into tool_jobs (id, tool, state, owner_id, fencing_token, attempt, idempotency_key, payload, payload_hash,
                       created_at, claimed_at, heartbeat_at, lease_until, cancel_requested_at, cancel_requested_by,
                       side_effect_started_at)
select gen_random_uuid(), 'bench_tool',
       case when g % 100 = 0 then 'outcome_unknown' when g % 100 = 1 then 'cancel_requested' else 'running' end,
       'w-' || (g % 64), 1, 1, 'active:' || g, '{"n": 1}'::jsonb, 'h',
       now() - interval '2 minutes', now() - interval '2 minutes',
       case when g % 20 = 2 then now() - interval '50 seconds' else now() + interval '30 minutes' end,
       case when g % 100 = 0 then null when g % 50 = 3 then now() - interval '5 seconds'
            else now() + interval '40 minutes' end,
       case when g % 100 = 1 then now() - interval '90 seconds' end,
       case when g % 100 = 1 then 'bench' end,
       case when g % 100 = 0 then now() - interval '100 seconds' end
from generate_series(1, :count::integer) as g
