-- 0007: what the auditor's questions need (issue 13), and nothing the write path would pay for.
--
-- The audit reads (queries/audit/) answer from job_events and fleet_events alone. Most of them
-- are served by what 0001-0006 already built:
--   audit owner, jobs --at, verify   job_events_job_idx (job_id, id): one call's history in order,
--                                    or every call's history in one ordered pass
--   audit export, the Audit screen   the primary key (id): oldest first / newest first by keyset,
--                                    and job_events_at_idx (BRIN on at) for --since / --until
--   the operator journal, unfiltered job_events_notable_idx (0003): its predicate holds every
--                                    operator kind, read newest first
-- What was missing is "what did this operator do", newest first, across every call: without an
-- index it is a walk of the whole history (1,000,000 events: ~150 ms) to find a few hundred rows.
-- A partial index holds only the operator kinds -- rows the operator statements write, a few per
-- thousand events -- so claims, completions, state changes and worker events (the write path,
-- three or more events per call) add no index entry; they pay only the evaluation of the
-- predicate, a comparison of `kind` with four constants (measured with the protocol benchmark
-- before and after: no slower, see README).
--
-- Deliberately NOT indexed (each would cost every event of the write path an index entry):
--   at as a btree (the BRIN serves ranges; exports stream in id order, which is append order),
--   owner_to / owner_from (owner: on the Audit screen walks newest first until its page is full),
--   actor for all kinds.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`.

create index if not exists job_events_operator_idx on job_events (actor, at)
    where kind in ('operator_cancel', 'operator_mark_terminal', 'operator_approve_retry',
                   'operator_action_failed');

-- fleet shutdowns asked by operators (applied or refused): the fleet journal is small and off the
-- call path, but the journal reads it with the calls' operator rows in one newest-first merge.
create index if not exists fleet_events_operator_idx on fleet_events (actor, at)
    where kind in ('shutdown_requested', 'shutdown_refused');
create index if not exists fleet_events_operator_at_idx on fleet_events (at)
    where kind in ('shutdown_requested', 'shutdown_refused');

insert into leasectl_migrations (version, name) values (7, '0007_audit')
on conflict (version) do nothing;
