-- 0006: bounds on what people type, and one definition of a zombie.
--
-- A reason is journaled with every operator action and every shutdown. It is an input, not a
-- place for a pasted log: a 120 KB one was once journaled. The console and the CLI refuse more
-- than 1,000 characters before sending; the database refuses it whatever a client sends. The
-- checks are NOT VALID: history is append-only and older rows stay as they were written.
-- (tool_jobs' reason columns are written by the operator statements from the same reason as
-- their journal row, in the same statement: the journal's check refuses both.)

alter table job_events
    add constraint job_events_reason_bounded check (length(reason) <= 1000) not valid;
alter table fleet_events
    add constraint fleet_events_reason_bounded check (length(reason) <= 1000) not valid;
alter table shutdowns
    add constraint shutdowns_reason_bounded check (length(reason) <= 1000) not valid;

-- A zombie: a write with a stale fencing token was refused for this call in the last five
-- minutes (the worker's heartbeat, its result, or a receiver). The views that label one call
-- (views/job.sql, views/jobs.sql) ask this function; triage reads the same kinds through the
-- partial index job_events_rejections_idx, whose predicate must stay literal (migration 0001).
-- A plain SQL expression: the planner inlines it into each view.
create function leasectl_recently_rejected(p_job_id uuid, p_now timestamptz) returns boolean
language sql stable parallel safe as $$
    select exists (
        select 1 from public.job_events e
        where e.job_id = p_job_id
          and e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
          and e.at > p_now - interval '5 minutes')
$$;

insert into leasectl_migrations (version, name) values (6, '0006_bounds')
on conflict (version) do nothing;
