-- Purpose: an agent registers itself in the delegation tree (a child names its parent). Idempotent:
--   registering again returns the agent as it is. Refused under a parent that is not running:
--   a draining subtree spawns no new children.
-- Zero rows: the parent is not running (draining, aborting, terminated) or does not exist.
-- Parameters: agent_id, parent_id, kind
insert into agents (id, parent_id, kind, last_seen_at)
select :agent_id::text, :parent_id::text, :kind::text, now()
where :parent_id::text is null
   or exists (select 1 from agents p where p.id = :parent_id::text and p.state = 'running')
on conflict (id) do update set last_seen_at = excluded.last_seen_at
returning id, parent_id, kind, state, started_at
