-- Purpose: benchmark databases only: add `count` live calls with a realistic mix of lease
--   health (mostly healthy; some late heartbeats, expired leases, unheard cancels, outcome
--   unknown), written in exact mode. Healthy ones have their last heartbeat now and a lease 40
--   minutes ahead, so the mix of leases stays the same for a benchmark run (nobody heartbeats
--   them; a heartbeat is never dated in the future, migration 0015).
-- Zero rows: always.
-- Parameters: count
insert into tool_jobs (id, chain_id, tool, state, owner_id, fencing_token, attempt, idempotency_key, payload, payload_hash,
                       created_at, claimed_at, heartbeat_at, lease_until, cancel_requested_at, cancel_requested_by,
                       side_effect_started_at)
select x.id, x.id, 'bench_tool',
       case when g % 100 = 0 then 'outcome_unknown' when g % 100 = 1 then 'cancel_requested' else 'running' end,
       'w-' || (g % 64), 1, 1, 'active:' || g, '{"n": 1}'::jsonb, 'h',
       now() - interval '2 minutes', now() - interval '2 minutes',
       case when g % 20 = 2 or g % 50 = 3 then now() - interval '50 seconds' else now() end,
       case when g % 100 = 0 then null when g % 50 = 3 then now() - interval '5 seconds'
            else now() + interval '40 minutes' end,
       case when g % 100 = 1 then now() - interval '90 seconds' end,
       case when g % 100 = 1 then 'bench' end,
       case when g % 100 = 0 then now() - interval '100 seconds' end
from (select gen_random_uuid() as id, g from generate_series(1, :count::integer) as g) x
