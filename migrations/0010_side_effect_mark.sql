-- 0010: the mark of a started side effect is the database's to keep, not the worker's to erase.
--
-- side_effect_started_at is what sends a call whose answer was lost to a human instead of back to
-- the queue (LCS07, fail.sql, claim.sql), and external_request_id is what that human checks with
-- the other side. A leasectl_worker login may update both on the call it owns (0002 grants them:
-- start_side_effect.sql sets them), and no trigger judged them: the state guard fires on
-- UPDATE OF other columns. So the owner of a payment whose request had gone out could clear the
-- mark with a plain UPDATE, then fail the call as retryable: back in the queue, paid twice, no
-- human asked. Found by a review in the session of 2026-12-04 (tests/db/test_trust.py).
--
-- The rule, for every login (a superuser with the trigger disabled excepted):
--   * the mark is never cleared, but by a human's approved retry (outcome_unknown -> queued,
--     operator/approve_retry.sql: the next attempt starts unmarked, the old mark stays in
--     job_events);
--   * the mark never moves back in time;
--   * the external request id changes only with a new start (the mark set or moved forward), and
--     the approved retry keeps it, so the next owner sees which request may already have run.
-- A new start (start_side_effect.sql, once per request) passes; it is journaled as before.
--
-- Cost: the trigger fires only for an UPDATE that names one of the two columns (a start, an
-- approval), never for a claim, a heartbeat or a completion, and its WHEN clause has no text
-- constant to parse (0009).
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`.

create or replace function leasectl_tool_jobs_side_effect_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    if old.side_effect_started_at is not null and new.side_effect_started_at is null then
        if old.state = 'outcome_unknown' and new.state = 'queued' then
            -- the approved retry: the state guard (tool_jobs_guard_update, after this trigger) refuses
            -- it unless a human approved it (LCS04, LCS09)
            if new.external_request_id is distinct from old.external_request_id then
                raise exception 'call %: an approved retry keeps the external request id', old.id
                    using errcode = 'LCS07';
            end if;
            return new;
        end if;
        raise exception 'call % started a side effect at %: the mark is kept (only a human''s approved retry clears it)',
            old.id, old.side_effect_started_at using errcode = 'LCS07';
    end if;
    if new.side_effect_started_at < old.side_effect_started_at then
        raise exception 'call %: the side effect''s start cannot move back in time (% -> %)',
            old.id, old.side_effect_started_at, new.side_effect_started_at using errcode = 'LCS07';
    end if;
    if new.external_request_id is distinct from old.external_request_id
       and new.side_effect_started_at is not distinct from old.side_effect_started_at then
        raise exception 'call %: the external request id changes only with a new start (start_side_effect.sql)',
            old.id using errcode = 'LCS07';
    end if;
    return new;
end $$;

create trigger tool_jobs_guard_side_effect
    before update of side_effect_started_at, external_request_id
    on tool_jobs
    for each row
    when (old.side_effect_started_at is not null or old.external_request_id is not null)
    execute function leasectl_tool_jobs_side_effect_guard();

insert into leasectl_migrations (version, name) values (10, '0010_side_effect_mark')
on conflict (version) do nothing;
