-- Purpose: worker logins that more than one worker used in the last hour: claims whose owner
--   ids differ (`login:w-1`, `login:w-2`, ...) but whose database role (db_role) is the same
--   bound login. It works, but the database cannot tell those workers apart: any of them can
--   write the others' calls. Only logins that row level security binds are counted (a superuser
--   or the owner may name any worker).
-- Zero rows: every worker login ran one worker id in the last hour (or none ran).
-- Parameters: none
select e.db_role as login,
       count(distinct e.owner_to) as worker_names,
       (array_agg(distinct e.owner_to))[1:5] as examples
from job_events e
join pg_roles r on r.rolname = e.db_role
where e.at > now() - interval '1 hour'
  and e.kind in ('claimed', 'reclaimed')
  and not r.rolsuper and not r.rolbypassrls
  and r.oid <> (select relowner from pg_class where oid = to_regclass('tool_jobs'))
  and to_regrole('leasectl_worker') is not null
  and pg_has_role(r.oid, to_regrole('leasectl_worker'), 'MEMBER')
group by e.db_role
having count(distinct e.owner_to) > 1
order by e.db_role
