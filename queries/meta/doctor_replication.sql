-- Purpose: what an acknowledged commit is worth here: whether this server is a primary, how many
--   standbys stream from it and how many of them a commit waits for (synchronous replication), as
--   `leasectl doctor` reports it. sync_replicas is null when the role may not see the standbys'
--   states (pg_stat_replication hides them from a role without pg_read_all_stats).
-- Zero rows: never.
-- Parameters: none
select pg_is_in_recovery() as in_recovery,
       current_setting('synchronous_standby_names') as synchronous_standby_names,
       current_setting('synchronous_commit') as synchronous_commit,
       (select count(*) from pg_stat_replication) as replicas,
       (select count(*) filter (where r.sync_state in ('sync', 'quorum'))
               + case when bool_and(r.sync_state is null) then null else 0 end
        from pg_stat_replication r) as sync_replicas
