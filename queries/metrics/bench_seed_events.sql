-- Purpose: benchmark databases only: add `count` history events of the kinds the metrics count
--   (claims, lost heartbeats, stale writes refused, reclaims, request starts, lock and statement
--   timeouts) for the live calls, spread over the last day and written in time order as a real
--   history is, in exact mode (the session must have set session_replication_role = replica:
--   demo/exact_mode.sql).
-- Zero rows: always.
-- Parameters: count
with calls as materialized (
    select array_agg(id) as ids from tool_jobs where state in ('running', 'cancel_requested', 'outcome_unknown')
),
made as (
    select c.ids[1 + (g % array_length(c.ids, 1))] as job_id,
           now() - (g % 86400) * interval '1 second' - (g % 7) * interval '1 millisecond' as at,
           (array['claimed', 'claimed', 'claimed', 'claimed', 'heartbeat_lost', 'result_rejected', 'reclaimed',
                  'tool_request_started', 'database_error', 'operator_action_failed'])[1 + g % 10] as kind
    from calls c, generate_series(1, :count::integer) as g
    where c.ids is not null
)
insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to, details)
select job_id, at, kind, 'bench', 1,
       case when kind = 'claimed' then 'queued' when kind = 'reclaimed' then 'running' end,
       case when kind in ('claimed', 'reclaimed') then 'running' end,
       case kind when 'claimed' then '{"attempt": 1}'::jsonb
                 when 'database_error' then '{"cause": "lock_timeout"}'::jsonb
                 when 'operator_action_failed' then '{"cause": "statement_timeout"}'::jsonb
                 else '{}'::jsonb end
from made
order by at
