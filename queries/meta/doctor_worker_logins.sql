-- Purpose: the login roles that act as workers (members of leasectl_worker, directly or not;
--   MEMBER, not USAGE: a NOINHERIT login can still SET ROLE), and what weakens the binding of
--   their worker ids: a login that is also an operator or a supervisor (those policies and
--   privileges let it write calls it does not own, so its worker identity cannot be bound), one
--   that row level security does not apply to (BYPASSRLS, the owner of tool_jobs), and a name
--   with ':' in it (`a:b` could be login a's worker b).
-- Zero rows: no login acts as a worker (or the leasectl_worker role is missing).
-- Parameters: none
select r.rolname as login,
       coalesce(pg_has_role(r.oid, to_regrole('leasectl_operator'), 'MEMBER'), false) as also_operator,
       coalesce(pg_has_role(r.oid, to_regrole('leasectl_supervisor'), 'MEMBER'), false) as also_supervisor,
       r.rolsuper or r.rolbypassrls or r.oid = (select relowner from pg_class where oid = to_regclass('tool_jobs'))
           as unbound,
       position(':' in r.rolname) > 0 as ambiguous_name
from pg_roles r
where r.rolcanlogin
  and not r.rolsuper
  and to_regrole('leasectl_worker') is not null
  and pg_has_role(r.oid, to_regrole('leasectl_worker'), 'MEMBER')
order by r.rolname
