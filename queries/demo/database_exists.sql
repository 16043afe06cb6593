-- Purpose: does the demo's database exist on this server?
-- Zero rows: it does not.
-- Parameters: none
select 1 as present from pg_database where datname = 'leasectl_demo'
