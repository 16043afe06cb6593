-- Purpose: benchmark databases only (tests/bench/protocol.py): put back what 0009 took away --
--   a NOTIFY on the leasectl_jobs channel for every change of a call's state, claims and
--   completions included, as the journal sent before 0009 -- to measure what announcing
--   everything would cost beside the reference worker that announces notable changes only.
--   A trigger of its own: the same payload, one row trigger more per update of state.
-- Zero rows: always.
-- Parameters: none
do $$
begin
    create function bench_notify_every_change() returns trigger
    language plpgsql set search_path = pg_catalog, public as $f$
    begin
        if new.state is distinct from old.state then
            perform pg_notify('leasectl_jobs',
                              json_build_object('id', new.id, 'state', new.state,
                                                'fencing_token', new.fencing_token)::text);
        end if;
        return null;
    end $f$;
    create trigger bench_notify_every_change
        after update of state on tool_jobs
        for each row execute function bench_notify_every_change();
end $$
