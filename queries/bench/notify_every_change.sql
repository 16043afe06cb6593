-- Purpose: benchmark databases only (tests/bench/protocol.py --notify-all): a NOTIFY on the
--   leasectl_jobs channel for every change of a call's state, claims and completions included,
--   with the payload the journal sends, to measure what announcing every change would cost beside
--   the reference worker that announces notable changes only. Before 0009 the journal announced
--   these from its own body (and enqueues and owner or token changes too; enqueues are not timed
--   here); this trigger is one more plpgsql row trigger per update of state, so the figure
--   includes that call as well.
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
