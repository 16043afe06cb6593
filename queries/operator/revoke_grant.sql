-- Purpose: an operator revokes one grant (`leasectl revoke`), as the control plane, which may
--   revoke any: runs the SECURITY DEFINER function leasectl_operator_revoke_grant (migration
--   0017), which revokes it (revoked_by 'control-plane'; the fleet journal writes grant_revoked)
--   and journals the decision as fleet_events operator_revoke with the operator's name, the reason
--   and the request id from the transaction setting leasectl.request_id, in one statement. The
--   database refuses an empty operator name or reason (22023).
-- Zero rows: no such grant, or it is revoked already (nothing changed, nothing journaled).
-- Parameters: grant_id, operator, reason
select id, agent_id, kind, resource, revoked_at, revoked_by
from leasectl_operator_revoke_grant(:grant_id::uuid, :operator::text, :reason::text)
