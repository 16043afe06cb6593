-- Purpose: the chain of one call told as one story (docs/seeds.md §000 stages, §004 the chain's
--   deadline; migration 0014): every call of its chain (the same chain_id), in stage order, each
--   with its tool, idempotency key, state and how it ended, who held it (every owner, in the order
--   of their first claim), when it was enqueued, first claimed (started_at), finished -- or, for a
--   call that left running without finishing (outcome unknown, requeued), when it last left it
--   (left_running_at) -- and the deadline it carries (a child's is capped at its parent's by the
--   database). this_call marks the call asked about. Ages from the database's (display) clock.
--   At most 200 calls, the first ones: a chain longer than that is cut (calls says how long).
-- Zero rows: no such call.
-- Parameters: job_id
with me as (
    select chain_id from tool_jobs where id = :job_id::uuid
)
select c.id, c.parent_id, c.chain_id, c.stage, c.tool, c.idempotency_key, c.state, c.owner_id,
       c.fencing_token, c.attempt, c.agent_id, c.created_at, c.accepted_at, c.claimed_at,
       c.finished_at, c.deadline_at, c.terminal_reason, c.cancel_requested_at,
       c.completed_despite_cancel, h.started_at, h.left_running_at, o.owners,
       c.id = :job_id::uuid as this_call,
       count(*) over () as calls,
       leasectl_now() as db_now
from me
-- the first call by its id, the later stages from tool_jobs_later_stages (migrations/0014_chains.sql)
join tool_jobs c on c.id = me.chain_id or (c.chain_id = me.chain_id and c.stage > 0)
-- when it started and last left running (migrations/0019_audit_rules.sql)
cross join lateral leasectl_call_span(c.id) h
cross join lateral (
    select coalesce(array_agg(w.owner order by w.first_at), '{}') as owners
    from (select e.owner_to as owner, min(e.at) as first_at
          from job_events e
          where e.job_id = c.id and e.kind in ('claimed', 'reclaimed') and e.owner_to is not null
          group by e.owner_to) w
) o
order by c.stage, c.created_at, c.id
limit 200
