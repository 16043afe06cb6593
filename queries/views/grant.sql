-- Purpose: one grant by its id or a prefix of it (hex, as the console shows ids): who holds it,
--   what, who issued it, when it expires, and whether (and by whom) it was revoked. At most two
--   rows, so that an ambiguous prefix is told apart from a unique one.
-- Zero rows: no grant has an id with that prefix.
-- Parameters: id_low, id_high (the range of ids the prefix covers, as views/jobs.sql's id_low/id_high)
select g.id, g.agent_id, g.kind, g.resource, g.issued_by, g.issued_at, g.expires_at, g.revoked_at, g.revoked_by,
       extract(epoch from g.expires_at - leasectl_now())::float8 as expires_in_seconds
from grants g
where g.id between :id_low::uuid and :id_high::uuid
order by g.id
limit 2
