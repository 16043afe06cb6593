-- Purpose: the supervisor's pass over orphans (migration 0018's leasectl_orphans: an agent whose
--   ancestor is terminated, or silent for longer than fleet.orphan_after_seconds, and which still
--   runs calls, was seen lately or holds live grants): it proposes an abort of each orphaned
--   subtree, at the orphan nearest its dead ancestor. A proposal starts nothing: an operator
--   accepts or declines it. No second proposal while one is proposed or a shutdown covers the
--   subtree, and none after a human declined one since the ancestor went quiet.
-- Zero rows: no new orphaned subtree.
-- Parameters: supervisor_id
select id, root_agent_id, reason
from leasectl_propose_orphan_shutdowns(:supervisor_id::text)
