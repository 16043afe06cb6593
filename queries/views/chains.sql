-- Purpose: chains of calls, newest first (docs/seeds.md §000 stages, §004 the chain's deadline;
--   migration 0014): one row per chain -- its first call (chain_id = the first call's id), how many
--   calls it has, and its calls in stage order as a json array (stages: id, parent_id, stage, tool,
--   idempotency_key, state, owner_id, attempt, agent_id, created_at, claimed_at, finished_at,
--   deadline_at, terminal_reason, and, from the history, started_at -- the first claim -- and
--   left_running_at -- when it last left running without finishing), the same facts
--   views/chain.sql tells one chain's story from. With include_lone false, a call that made no
--   later call (a chain of one: most calls) is left out: the chains are found from their later
--   stages (tool_jobs_later_stages), not by walking every call; with it true, the first calls are
--   walked newest first and the walk stops at :limit chains; at most 100 calls of a chain are listed (calls counts them all).
-- Zero rows: no chain (with include_lone false: no call has made another yet).
-- Parameters: include_lone (boolean), limit
with heads as materialized (
    (select f.id, f.created_at
     from tool_jobs f
     where :include_lone::boolean and f.id = f.chain_id
     order by f.created_at desc, f.id desc
     limit :limit::integer)
    union all
    -- chains of more than one call: their first calls, found from the later stages
    -- (tool_jobs_later_stages holds only those), however many lone calls there are
    (select f.id, f.created_at
     from tool_jobs f
     where not :include_lone::boolean
       and f.id in (select c.chain_id from tool_jobs c where c.stage > 0)
     order by f.created_at desc, f.id desc
     limit :limit::integer)
)
select hd.id as chain_id, hd.created_at,
       (select count(*) from tool_jobs c where c.id = hd.id or (c.chain_id = hd.id and c.stage > 0)) as calls,
       s.stages,
       leasectl_now() as db_now
from heads hd
cross join lateral (
    select coalesce(jsonb_agg(jsonb_build_object(
               'id', c.id, 'parent_id', c.parent_id, 'stage', c.stage, 'tool', c.tool,
               'idempotency_key', c.idempotency_key, 'state', c.state, 'owner_id', c.owner_id,
               'attempt', c.attempt, 'agent_id', c.agent_id, 'created_at', c.created_at,
               'claimed_at', c.claimed_at, 'finished_at', c.finished_at, 'deadline_at', c.deadline_at,
               'terminal_reason', c.terminal_reason, 'started_at', h.started_at,
               'left_running_at', h.left_running_at)
               order by c.stage, c.created_at, c.id), '[]'::jsonb) as stages
    from (select * from tool_jobs c
          -- the first call by its id, the later stages from tool_jobs_later_stages
          where c.id = hd.id or (c.chain_id = hd.id and c.stage > 0)
          order by c.stage, c.created_at, c.id
          limit 100) c
    -- when it started and last left running (migrations/0019_audit_rules.sql)
    cross join lateral leasectl_call_span(c.id) h
) s
order by hd.created_at desc, hd.id desc
