-- Purpose: is row level security on for tool_jobs, and which policies bind the group roles
--   (migration 0005)? Without it a leasectl_worker login can write any call, not only its own.
-- Zero rows: the schema is missing.
-- Parameters: none
select c.relrowsecurity as enabled,
       coalesce(array_agg(p.polname order by p.polname) filter (where p.polname is not null),
                '{}'::name[])::text[] as policies,
       exists (select 1 from pg_roles where rolname = 'leasectl_worker') as worker_role_exists,
       exists (select 1 from pg_roles where rolname = 'leasectl_supervisor') as supervisor_role_exists
from pg_class c
left join pg_policy p on p.polrelid = c.oid
where c.oid = to_regclass('tool_jobs')
group by c.relrowsecurity
