-- Purpose: what a login could use to fool the database's rules with objects of its own
--   (migration 0012): the guard and SECURITY DEFINER functions of the schema that do not search
--   pg_temp last, and, for each leasectl group role, whether its logins may create temporary
--   tables in this database and in which schemas they may create objects (a schema of its own
--   ahead of pg_catalog would let it define operators the inlined functions use).
-- Zero rows: never (one row).
-- Parameters: none
select coalesce((select array_agg(p.oid::regprocedure::text order by p.proname)
                 from pg_proc p
                 where p.pronamespace = 'public'::regnamespace
                   and p.proname like 'leasectl\_%'
                   and (p.prosecdef or p.prorettype = 'trigger'::regtype)
                   and not coalesce('search_path=pg_catalog, public, pg_temp' = any (p.proconfig), false)),
                '{}') as unsafe_functions,
       coalesce((select array_agg(r.rolname order by r.rolname)
                 from pg_roles r
                 where r.rolname in ('leasectl_worker', 'leasectl_operator', 'leasectl_auditor', 'leasectl_supervisor')
                   and has_database_privilege(r.oid, current_database(), 'TEMPORARY')),
                '{}') as temp_roles,
       coalesce((select array_agg(distinct r.rolname || ' in ' || n.nspname)
                 from pg_roles r
                 cross join pg_namespace n
                 where r.rolname in ('leasectl_worker', 'leasectl_operator', 'leasectl_auditor', 'leasectl_supervisor')
                   and n.nspname not like 'pg\_%' and n.nspname <> 'information_schema'
                   and has_schema_privilege(r.oid, n.oid, 'CREATE')),
                '{}') as create_grants,
       current_database() as database
