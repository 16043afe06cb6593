-- Purpose: the triggers that enforce the state machine and write history, and whether they
--   are enabled (a disabled one means the database no longer protects the protocol).
-- Zero rows: the schema is missing.
-- Parameters: none
select t.tgname as name, c.relname as table_name, t.tgenabled <> 'D' as enabled
from pg_trigger t
join pg_class c on c.oid = t.tgrelid
where not t.tgisinternal
  and c.relname in ('tool_jobs', 'job_events', 'agents', 'grants', 'shutdowns',
                    'reconciliation_records', 'fleet_events')
  and c.relnamespace = to_regnamespace(current_schema())
order by c.relname, t.tgname
