-- Purpose: an agent registers itself in the delegation tree (a child names its parent). Idempotent:
--   registering again from the same login returns the agent as it is (and says it was seen now).
--   Refused under a parent that is not running: a draining subtree spawns no new children (the
--   database refuses that for any SQL, LCF07). The agent belongs to the login that registered it
--   (agents.owner_role, set by the database): that login speaks for its subtree when grants are
--   issued or revoked. A new generation names the agent it `replaces` (migration 0018: the
--   database sets `generation` to one more than that agent's, and only the login that registered
--   the old one may replace it, LCF09); a shutdown of the old one may then move its queued calls
--   here (the upgrade path: drain, reconcile, restart). Not an upsert: under row level security an ON CONFLICT DO UPDATE that meets
--   another login's agent raises instead of answering zero rows.
-- Zero rows: the parent is not running (draining, aborting, terminated) or does not exist, or the
--   id is already registered by another login (taken: choose another id, or ask who holds it).
-- Parameters: agent_id, parent_id, kind, replaces (optional: the agent this one replaces)
-- Optional: replaces
with existing as (
    select a.id from agents a where a.id = :agent_id::text
),
registered as (
    insert into agents (id, parent_id, kind, last_seen_at, replaces)
    select :agent_id::text, :parent_id::text, :kind::text, now(), :replaces::text
    where not exists (select 1 from existing)
      and (:parent_id::text is null
           or exists (select 1 from agents p where p.id = :parent_id::text and p.state = 'running'))
    on conflict (id) do nothing
    returning id, parent_id, kind, state, started_at, generation, replaces
),
seen_again as (
    update agents a
    set last_seen_at = now()
    where a.id = :agent_id::text
      and a.owner_role = session_user
      and exists (select 1 from existing)
    returning a.id, a.parent_id, a.kind, a.state, a.started_at, a.generation, a.replaces
)
select * from registered
union all
select * from seen_again
