-- Purpose: whether the control plane can end a worker session that sits on the fleet's rows
--   (leasectl_end_lock_holders, migration 0015): its owner must see every session's activity and
--   signal backends (a superuser, or a member of pg_read_all_stats and pg_signal_backend).
-- Zero rows: the function is missing (the schema is older than 0015).
-- Parameters: none
select r.rolname as owner,
       r.rolsuper or (pg_has_role(r.oid, 'pg_read_all_stats', 'member')
                      and pg_has_role(r.oid, 'pg_signal_backend', 'member')) as can_end
from pg_proc p
join pg_roles r on r.oid = p.proowner
where p.oid = 'leasectl_end_lock_holders(interval)'::regprocedure
