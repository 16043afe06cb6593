-- Purpose: the bulk operations, newest first: the running and stopping ones, then the others, up
--   to `limit`, each as bulk/operation.sql gives it.
-- Zero rows: no bulk operation was ever started.
-- Parameters: limit
select o.*, now() as db_now
from bulk_operations o
order by o.state in ('running', 'stopping') desc, o.created_at desc, o.id desc
limit :limit::integer
