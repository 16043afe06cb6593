-- Purpose: transactions open for long on this database: they hold back vacuum (and row locks),
--   which is how one forgotten session wrecks a busy queue.
-- Zero rows: never (one row of figures).
-- Parameters: none
select (select count(*) from pg_stat_activity
        where datname = current_database() and xact_start < now() - interval '1 minute'
          and pid <> pg_backend_pid()) as long_transactions,
       (select max(extract(epoch from now() - xact_start))::int from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()) as oldest_transaction_seconds
