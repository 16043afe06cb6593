-- 0003: what the console's read views share.
--
-- leasectl_now(): the display clock of the read views (queries/views/*): now(), unless the
-- session set leasectl.clock to an instant. Snapshot tests and screenshots use it to render a
-- fixed moment over fixture rows. The protocol (queries/worker, operator, supervisor) never
-- uses it: every guard compares with the real now().

create function leasectl_now() returns timestamptz
language sql stable parallel safe as $$
    select coalesce(nullif(current_setting('leasectl.clock', true), '')::timestamptz, now())
$$;

-- The triage screen's "recently" panel (views/recent_events.sql) reads only notable events of
-- the last minutes. A partial index holds just those, so the read costs what it returns however
-- long and however ordered the history is, and ordinary events (claims, completions) never
-- enter it. The predicate must stay identical to the view's filter.
create index if not exists job_events_notable_idx on job_events (at)
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'ownership_unknown',
                   'operator_action_failed', 'operator_cancel', 'operator_mark_terminal',
                   'operator_approve_retry')
       or (kind = 'state_changed'
           and (state_to in ('failed', 'outcome_unknown') or details ? 'completed_despite_cancel'));

insert into leasectl_migrations (version, name) values (3, '0003_console')
on conflict (version) do nothing;
