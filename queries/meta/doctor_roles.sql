-- Purpose: leasectl's group roles and the login roles that are members of them, with the
--   session limits each carries (ALTER ROLE ... SET applies to the role that logs in, not to
--   members, so each login role needs its own).
-- Zero rows: no leasectl group role exists (they were skipped at migration).
-- Parameters: none
select g.rolname as group_role,
       m.rolname as member,
       m.rolcanlogin as member_can_login,
       coalesce(array_to_string(gs.setconfig, ', '), '') as group_settings,
       coalesce(array_to_string(ms.setconfig, ', '), '') as member_settings
from pg_roles g
left join pg_auth_members am on am.roleid = g.oid
left join pg_roles m on m.oid = am.member
left join pg_db_role_setting gs on gs.setrole = g.oid and gs.setdatabase = 0
left join pg_db_role_setting ms on ms.setrole = m.oid and ms.setdatabase = 0
where g.rolname in ('leasectl_worker', 'leasectl_operator', 'leasectl_auditor', 'leasectl_supervisor')
order by g.rolname, m.rolname
