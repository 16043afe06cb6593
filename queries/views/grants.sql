-- Purpose: the grants the fleet still holds (not revoked), for the Fleet screen and `leasectl
--   fleet`: who holds what, who issued it, and how long until it expires (negative: expired,
--   never revoked -- a reconciliation lists those as expired).
-- Zero rows: no agent holds any grant.
-- Parameters: limit
select g.id, g.agent_id, g.kind, g.resource, g.issued_by, g.issued_at, g.expires_at,
       extract(epoch from g.expires_at - leasectl_now())::float8 as expires_in_seconds
from grants g
where g.revoked_at is null
order by g.agent_id, g.expires_at, g.id
limit :limit::integer
