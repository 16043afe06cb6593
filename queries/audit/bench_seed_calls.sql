-- Purpose: benchmark databases only (tests/bench/audit.py): the tool_jobs rows of the calls whose
--   history audit/bench_seed_events.sql wrote (same ids and instants), as they ended: cancelled,
--   failed or succeeded, owned by the third worker under token 3 after 3 attempts. Exact mode
--   (session_replication_role = replica, superuser).
-- Zero rows: always.
-- Parameters: start, count, base
insert into tool_jobs (id, chain_id, tool, state, owner_id, fencing_token, attempt, idempotency_key, payload, payload_hash,
                       result, created_at, claimed_at, finished_at, cancel_requested_at, cancel_requested_by,
                       cancel_requested_reason, side_effect_started_at, external_request_id, terminal_reason,
                       agent_id)
select md5('audit-bench:' || g)::uuid, md5('audit-bench:' || g)::uuid, 'bench_audit',
       case when g % 20 = 0 then 'cancelled' when g % 7 = 0 then 'failed' else 'succeeded' end,
       'w-' || ((g + 42) % 64), 3, 3, 'audit-bench:' || g, jsonb_build_object('n', g), 'h',
       case when g % 20 <> 0 and g % 7 <> 0 then '{"ok": true}'::jsonb end,
       t0, t0 + interval '95 seconds', t0 + interval '100 seconds',
       case when g % 20 = 0 then t0 + interval '97 seconds' end,
       case when g % 20 = 0 then 'op-' || (g % 40) end,
       case when g % 20 = 0 then 'user left' end,
       t0 + interval '2 seconds', 'req-' || g,
       case when g % 20 = 0 then 'cancel confirmed by the worker' when g % 7 = 0 then 'failed: not retryable' end,
       'agent-' || (g % 50)
from (select g, :base::timestamptz + g * interval '25 seconds' as t0
      from generate_series(:start::integer + 1, :start::integer + :count::integer) as g) c
