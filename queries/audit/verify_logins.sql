-- Purpose: `leasectl audit verify`: every role of the cluster by name, and whether it is a *worker
--   login* now -- it has the privileges of leasectl_worker (pg_has_role USAGE) and not those of
--   leasectl_operator nor leasectl_supervisor, is no superuser, and does not own job_events. Each
--   event's db_role is looked up here: a worker login's events are held against their kind
--   (console.shared.audit.login_violation); a db_role missing from the answer is a role dropped
--   since (an unknown login). A group role that does not exist (a schema migrated without
--   CREATEROLE) grants nothing. One row per role: a few, whatever the size of the history.
-- Zero rows: never (the session's own role is one).
-- Parameters: none
select r.rolname::text as login,
       coalesce(pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('leasectl_worker'), 'USAGE'), false)
       and not coalesce(pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('leasectl_operator'), 'USAGE'), false)
       and not coalesce(pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('leasectl_supervisor'), 'USAGE'),
                        false)
       and not r.rolsuper
       and r.oid <> t.relowner as worker
from pg_catalog.pg_roles r
cross join (select c.relowner from pg_catalog.pg_class c where c.oid = 'public.job_events'::pg_catalog.regclass) t
order by r.rolname
