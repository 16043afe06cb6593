-- Purpose: the agent tree as the Fleet screen and `leasectl fleet` show it, parents before
--   their children: each agent's state, when it was last seen, its live calls, the grants it
--   still holds (live = not revoked and not expired), and the shutdown under way over it; its
--   generation and the agent it replaces, whether it is orphaned (migration 0018's
--   leasectl_orphans: by which ancestor, why, since when) and the proposal that stands over it.
-- Zero rows: no agent is registered.
-- Parameters: none
with recursive tree as (
    -- live trees first, terminated ones last; within a tree, children in the order they started
    select a.id, 0 as depth, array[(a.state = 'terminated')::int::text || a.started_at::text || a.id] as path
    from agents a
    where a.parent_id is null
    union all
    select a.id, t.depth + 1, t.path || (a.started_at::text || a.id)
    from agents a
    join tree t on a.parent_id = t.id
),
live_calls as (
    select j.agent_id,
           count(*) filter (where j.state = 'queued') as queued_calls,
           count(*) filter (where j.state in ('running', 'cancel_requested')) as running_calls
    from tool_jobs j
    where j.agent_id is not null and j.state in ('queued', 'running', 'cancel_requested')
    group by j.agent_id
),
held as (
    select g.agent_id,
           count(*) filter (where g.expires_at > leasectl_now()) as live_grants,
           count(*) filter (where g.expires_at <= leasectl_now()) as expired_grants
    from grants g
    where g.revoked_at is null
    group by g.agent_id
),
under_way as (
    select s.id, s.root_agent_id, s.mode, s.state
    from shutdowns s
    where s.state not in ('terminated', 'declined')
),
orphans as (
    select o.agent_id, o.ancestor_id, o.why, o.since from leasectl_orphans() o
)
select a.id, a.parent_id, a.kind, a.state, a.started_at, a.last_seen_at, a.terminated_confirmed_at,
       t.depth,
       coalesce(c.queued_calls, 0) as queued_calls,
       coalesce(c.running_calls, 0) as running_calls,
       coalesce(h.live_grants, 0) as live_grants,
       coalesce(h.expired_grants, 0) as expired_grants,
       (select u.id from under_way u
        where u.state <> 'proposed' and (u.root_agent_id = a.id or leasectl_is_ancestor(u.root_agent_id, a.id))
        limit 1) as shutdown_id,
       (select u.id from under_way u
        where u.state = 'proposed' and (u.root_agent_id = a.id or leasectl_is_ancestor(u.root_agent_id, a.id))
        limit 1) as proposal_id,
       a.generation, a.replaces,
       o.ancestor_id as orphan_of, o.why as orphan_why, o.since as orphan_since,
       extract(epoch from leasectl_now() - a.last_seen_at)::float8 as last_seen_age_seconds,
       leasectl_now() as db_now
from tree t
join agents a on a.id = t.id
left join live_calls c on c.agent_id = a.id
left join held h on h.agent_id = a.id
left join orphans o on o.agent_id = a.id
order by t.path
