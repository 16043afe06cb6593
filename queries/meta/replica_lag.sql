-- Purpose: how far behind the primary a replica's reads are (the console's header, when a
--   context has a read_dsn): caught_up when everything received has been replayed (an idle
--   primary sends nothing, so the last replayed commit's age alone would read as growing lag);
--   lag_seconds is the age of the last replayed commit otherwise. On a primary: replica false.
-- Zero rows: never.
-- Parameters: none
select pg_is_in_recovery() as replica,
       coalesce(pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), false) as caught_up,
       case when pg_is_in_recovery()
            then extract(epoch from now() - pg_last_xact_replay_timestamp())::float8 end as lag_seconds
