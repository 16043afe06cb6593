-- Purpose: an operator (an authority outside the subtree) asks for a drain or an abort of the
--   subtree rooted at an agent, with a window for in-flight calls; the supervisor carries it out
--   and writes the reconciliation record before anything is terminated. The database refuses a
--   request from an agent inside the subtree (LCF01). Applied requests are journaled in
--   fleet_events by trigger; refusals are journaled here, in the same statement (with the
--   request id taken from the transaction setting leasectl.request_id when the caller set one).
-- Zero rows: refused -- no such agent, it is not running (already draining, aborting,
--   terminated), or a shutdown of it, of an ancestor or of a descendant is already under way.
-- Parameters: root_agent_id, mode, requested_by, reason, window_seconds
with overlapping as (
    -- a shutdown already under way whose subtree meets this one
    select s.id, s.root_agent_id
    from shutdowns s
    where s.state <> 'terminated'
      and (s.root_agent_id in (select agent_id from leasectl_subtree(:root_agent_id::text))
           or leasectl_is_ancestor(s.root_agent_id, :root_agent_id::text))
    limit 1
),
attempt as (
    insert into shutdowns (root_agent_id, mode, requested_by, reason, window_seconds)
    select a.id, :mode::text, :requested_by::text, :reason::text, :window_seconds::numeric
    from agents a
    where a.id = :root_agent_id::text
      and a.state = 'running'
      and not exists (select 1 from overlapping)
    on conflict do nothing
    returning id, root_agent_id, mode, state, requested_by, reason, requested_at, window_seconds
),
refusal as (
    insert into fleet_events (kind, actor, agent_id, reason, request_id, details)
    select 'shutdown_refused', :requested_by::text, :root_agent_id::text, :reason::text,
           nullif(current_setting('leasectl.request_id', true), '')::uuid,
           jsonb_strip_nulls(jsonb_build_object(
               'mode', :mode::text,
               'agent_state', a.state,
               'shutdown_under_way', (select id from overlapping),
               'refusal', case
                   when a.state <> 'running' then 'agent ' || a.id || ' is ' || a.state
                   when exists (select 1 from overlapping)
                       then 'a shutdown of ' || (select root_agent_id from overlapping) || ' is already under way'
                   else 'a shutdown of ' || a.id || ' was requested at the same moment' end))
    from agents a
    where a.id = :root_agent_id::text
      and not exists (select 1 from attempt)
)
select * from attempt
