-- Purpose: run by a worker at start, before its first claim: may this session own calls as
--   worker_id? A session of a leasectl_worker login (row level security applies to it) owns
--   calls only as `<login>` or `<login>:<name>`; the database refuses any other owner id
--   (LCS08) and any write to a call it does not own. Superusers and the schema owner are not
--   bound (bound = false): any worker_id is acceptable for them.
-- Zero rows: never (one row: acceptable, and the expected form when it is not).
-- Parameters: worker_id
select :worker_id::text as worker_id,
       session_user::text as login,
       b.bound,
       not b.bound or coalesce(leasectl_worker_id_bound(:worker_id::text), false) as acceptable,
       case when b.bound then session_user || ' or ' || session_user || ':<name>' end as expected
from (select leasectl_binds_worker_identity() as bound) b
