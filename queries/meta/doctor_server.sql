-- Purpose: who and where we are: server version, database, role, and what the role may do.
-- Zero rows: never.
-- Parameters: none
select current_setting('server_version') as server_version,
       current_setting('server_version_num')::int as server_version_num,
       current_database() as database,
       current_user as role,
       r.rolsuper as superuser,
       r.rolcreaterole as createrole,
       current_setting('default_transaction_read_only') as read_only,
       now() as db_now
from pg_roles r
where r.rolname = current_user
