-- Purpose: the control plane revokes every live grant of the subtree (credentials, file locks,
--   queue reservations, rate-limit tokens), whoever issued them and whether or not the holder
--   is still there. Grants already past expires_at are left alone: the record lists them as
--   expired, not revoked.
-- Zero rows: the subtree holds no live grant.
-- Parameters: root_agent_id
update grants g
set revoked_at = now(),
    revoked_by = 'control-plane'
from leasectl_subtree(:root_agent_id::text) s,
     (select set_config('leasectl.actor', 'control-plane', true)) as actor
where g.agent_id = s.agent_id
  and g.revoked_at is null
  and g.expires_at > now()
returning g.id, g.agent_id, g.kind, g.resource
