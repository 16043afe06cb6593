-- Purpose: the control plane writes, from outside, what happened to a subtree before anything
--   in it is called terminated (docs/seeds.md §003): every call that was in flight when the shutdown was
--   requested (or came after) and how it resolved -- completed, failed, cancelled,
--   cancel_unconfirmed (stopped while running without its worker confirming), outcome_unknown,
--   never_started; every grant revoked vs. already expired; every agent of the subtree that
--   confirmed it stopped vs. unaccounted. One record per shutdown, whoever writes first.
--   A shutdown that named a replacement (migration 0018) lists the calls it moved to the new
--   generation (calls_moved, and in in_flight as resolution `moved` with `moved_to`), and says of
--   each queued call it cancelled instead why it did not move (`not_moved`).
--   Run it after subtree_revoke_grants.sql in the same transaction: a grant not revoked by then
--   is listed as expired.
-- Zero rows: the record was already written (by another supervisor); nothing changed.
-- Parameters: shutdown_id, written_by
with shutdown as (
    select id, root_agent_id, requested_at from shutdowns where id = :shutdown_id::uuid
),
tree as (
    select t.agent_id, t.depth from shutdown s cross join lateral leasectl_subtree(s.root_agent_id) t
),
moves as (
    select (e.details ->> 'job_id')::uuid as job_id, e.kind, e.agent_id as from_agent_id,
           e.details ->> 'to_agent_id' as to_agent_id, e.reason, e.at, e.id as event_id
    from fleet_events e
    where e.shutdown_id = :shutdown_id::uuid and e.kind in ('call_moved', 'call_not_moved')
),
moved as (
    select distinct on (m.job_id) m.job_id, j.tool, m.from_agent_id, m.to_agent_id, m.at, j.attempt,
           j.fencing_token, j.finished_at, j.created_at
    from moves m join tool_jobs j on j.id = m.job_id
    where m.kind = 'call_moved'
    order by m.job_id, m.event_id desc
),
calls as (
    select j.id, j.tool, j.agent_id, j.state, j.attempt, j.created_at, j.finished_at, j.fencing_token,
           case
               when j.state = 'succeeded' then 'completed'
               when j.state = 'failed' then 'failed'
               when j.state = 'outcome_unknown' then 'outcome_unknown'
               when j.state = 'cancelled' and j.attempt = 0 then 'never_started'
               -- stopped while running by someone other than its owner: nobody confirmed it stopped
               when j.state = 'cancelled' and exists (
                   select 1 from job_events e
                   where e.job_id = j.id and e.state_to = 'cancelled'
                     and e.state_from in ('running', 'cancel_requested')
                     and e.actor is distinct from e.owner_from) then 'cancel_unconfirmed'
               when j.state = 'cancelled' then 'cancelled'
               else j.state  -- still live: the supervisor never writes a record while any is
           end as resolution
    from tool_jobs j
    join tree on tree.agent_id = j.agent_id
    cross join shutdown s
    where j.finished_at is null or j.finished_at >= s.requested_at
),
grant_list as (
    select g.id, g.agent_id, g.kind, g.resource, g.issued_by, g.expires_at, g.revoked_at, g.revoked_by
    from grants g
    join tree on tree.agent_id = g.agent_id
    cross join shutdown s
    where g.revoked_at is null or g.revoked_at >= s.requested_at
),
children as (
    -- a confirmation counts only if made during this shutdown (0013 dates it now, once; one from
    -- before the request would be somebody else's word, not the agent's answer to this shutdown)
    select a.id, a.parent_id, a.kind, tree.depth,
           case when a.terminated_confirmed_at >= s.requested_at then a.terminated_confirmed_at end
               as terminated_confirmed_at,
           a.last_seen_at
    from agents a
    join tree on tree.agent_id = a.id
    cross join shutdown s
)
insert into reconciliation_records (shutdown_id, written_by, in_flight, grants_revoked, grants_expired,
                                    children_confirmed, children_unaccounted, calls_moved)
select s.id, :written_by::text,
       coalesce((select jsonb_agg(jsonb_build_object(
                            'job_id', c.id, 'tool', c.tool, 'resolution', c.resolution, 'agent_id', c.agent_id,
                            'attempt', c.attempt, 'fencing_token', c.fencing_token, 'finished_at', c.finished_at)
                        || coalesce((select jsonb_build_object('not_moved', m.reason) from moves m
                                     where m.job_id = c.id and m.kind = 'call_not_moved'
                                     order by m.event_id desc limit 1), '{}'::jsonb)
                        order by c.created_at, c.id) from calls c), '[]'::jsonb)
       || coalesce((select jsonb_agg(jsonb_build_object(
                            'job_id', m.job_id, 'tool', m.tool, 'resolution', 'moved', 'agent_id', m.from_agent_id,
                            'moved_to', m.to_agent_id, 'attempt', m.attempt, 'fencing_token', m.fencing_token,
                            'finished_at', m.finished_at)
                        order by m.created_at, m.job_id) from moved m), '[]'::jsonb),
       coalesce((select jsonb_agg(jsonb_build_object(
                            'grant_id', g.id, 'agent_id', g.agent_id, 'kind', g.kind, 'resource', g.resource,
                            'issued_by', g.issued_by, 'revoked_by', g.revoked_by, 'revoked_at', g.revoked_at,
                            'expires_at', g.expires_at)
                        order by g.revoked_at, g.id)
                 from grant_list g where g.revoked_at is not null), '[]'::jsonb),
       coalesce((select jsonb_agg(jsonb_build_object(
                            'grant_id', g.id, 'agent_id', g.agent_id, 'kind', g.kind, 'resource', g.resource,
                            'issued_by', g.issued_by, 'expires_at', g.expires_at)
                        order by g.expires_at, g.id)
                 from grant_list g where g.revoked_at is null), '[]'::jsonb),
       coalesce((select jsonb_agg(jsonb_build_object(
                            'agent_id', c.id, 'parent_id', c.parent_id, 'kind', c.kind, 'depth', c.depth,
                            'confirmed_at', c.terminated_confirmed_at)
                        order by c.depth, c.id)
                 from children c where c.terminated_confirmed_at is not null), '[]'::jsonb),
       coalesce((select jsonb_agg(jsonb_build_object(
                            'agent_id', c.id, 'parent_id', c.parent_id, 'kind', c.kind, 'depth', c.depth,
                            'last_seen_at', c.last_seen_at)
                        order by c.depth, c.id)
                 from children c where c.terminated_confirmed_at is null), '[]'::jsonb),
       coalesce((select jsonb_agg(jsonb_build_object(
                            'job_id', m.job_id, 'tool', m.tool, 'from_agent_id', m.from_agent_id,
                            'to_agent_id', m.to_agent_id, 'at', m.at)
                        order by m.at, m.job_id) from moved m), '[]'::jsonb)
from shutdown s
on conflict (shutdown_id) do nothing
returning id, shutdown_id, written_by, written_at, in_flight, grants_revoked, grants_expired,
          children_confirmed, children_unaccounted, calls_moved
