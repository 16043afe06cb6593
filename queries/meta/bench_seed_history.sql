-- Purpose: benchmark databases only: add `count` finished calls (succeeded, failed, cancelled)
--   spread over the last 30 days, one history event each, written in exact mode (the session
--   must have set session_replication_role = replica: demo/exact_mode.sql).
-- Zero rows: always.
-- Parameters: count, start (numbering of the keys, so batches do not collide)
with made as (
    insert into tool_jobs (id, chain_id, tool, state, owner_id, fencing_token, attempt, idempotency_key, payload,
                           payload_hash, result, created_at, claimed_at, finished_at)
    select x.id, x.id, 'bench_tool', (array['succeeded', 'failed', 'cancelled'])[1 + x.g % 3],
           'w-' || (x.g % 64), 1, 1, 'history:' || (:start::integer + x.g), '{"n": 1}'::jsonb, 'h', '{"ok": true}'::jsonb,
           now() - (x.g % 2592000) * interval '1 second' - interval '1 hour',
           now() - (x.g % 2592000) * interval '1 second' - interval '1 hour',
           now() - (x.g % 2592000) * interval '1 second' - interval '59 minutes'
    from (select gen_random_uuid() as id, g from generate_series(1, :count::integer) as g) x
    returning id, finished_at
)
insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to)
select id, finished_at, 'state_changed', 'bench', 1, 'running', 'succeeded' from made
