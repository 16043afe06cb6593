-- Purpose: the orphaned agents (migration 0018's one rule, leasectl_orphans): an agent whose
--   ancestor is terminated, or silent for longer than fleet.orphan_after_seconds, while it still
--   runs calls, was seen lately or holds live grants -- with that ancestor, why, since when, and the
--   proposal (or shutdown) that stands over it. Read by the Fleet screen, Triage and the metrics.
-- Zero rows: no orphan.
-- Parameters: none
select o.agent_id, o.ancestor_id, o.why, o.since, a.kind, a.state,
       (select s.id from shutdowns s
        where s.state = 'proposed'
          and (s.root_agent_id = o.agent_id or leasectl_is_ancestor(s.root_agent_id, o.agent_id))
        limit 1) as proposal_id
from leasectl_orphans() o
join agents a on a.id = o.agent_id
order by o.since, o.agent_id
