-- 0017: an operator revokes one grant (docs/seeds.md §003: a grant the fleet no longer needs, or
-- one that leaked, is taken back without shutting the subtree down).
--
--   leasectl_operator_revoke_grant   for operators and the control plane: revokes as the control
--                                    plane, which may revoke any grant (0012's rule: the grant's
--                                    row says revoked_by 'control-plane', and the fleet journal's
--                                    grant_revoked row stands beside it), and journals the human's
--                                    decision with its name and reason as operator_revoke, in the
--                                    same statement. A worker login keeps 0012's own rule (the
--                                    grants of descendants of an agent it registered): it may not
--                                    run this function.

create function public.leasectl_operator_revoke_grant(p_grant_id uuid, p_operator text, p_reason text)
returns table (id uuid, agent_id text, kind text, resource text, revoked_at timestamptz, revoked_by text)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_row public.grants;
begin
    if coalesce(p_operator ~ '[[:alnum:]]' and btrim(p_reason) <> '', false) is false then
        raise exception 'an operator name and a reason are required: both are journaled with the revocation'
            using errcode = '22023';
    end if;
    update public.grants g set revoked_at = now(), revoked_by = 'control-plane'
    where g.id = p_grant_id and g.revoked_at is null
    returning g.* into v_row;
    if not found then
        return;  -- no such grant, or revoked already: nothing changed, nothing journaled
    end if;
    insert into public.fleet_events (kind, actor, agent_id, grant_id, reason, request_id, details)
    values ('operator_revoke', p_operator, v_row.agent_id, v_row.id, p_reason,
            nullif(current_setting('leasectl.request_id', true), '')::uuid,
            jsonb_build_object('kind', v_row.kind, 'resource', v_row.resource));
    return query select v_row.id, v_row.agent_id, v_row.kind, v_row.resource, v_row.revoked_at, v_row.revoked_by;
end $$;
revoke all on function public.leasectl_operator_revoke_grant(uuid, text, text) from public;

-- the operator journal's fleet rows: shutdowns, pauses and now revocations
drop index public.fleet_events_operator_idx;
drop index public.fleet_events_operator_at_idx;
create index fleet_events_operator_idx on public.fleet_events (actor, at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke');
create index fleet_events_operator_at_idx on public.fleet_events (at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke');

-- A function of leasectl's runs as the role the guards recognise, the tables' owner (as 0005's
-- operator functions do): given to it where this migration may. Later migrations call this
-- instead of writing the block out again.
create function public.leasectl_give_to_owner(p_function regprocedure) returns void
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if (select proowner from pg_catalog.pg_proc where oid = p_function)
       <> (select relowner from pg_catalog.pg_class where oid = 'public.job_events'::regclass) then
        execute format('alter function %s owner to %I', p_function, public.leasectl_schema_owner());
    end if;
exception
    when insufficient_privilege then
        raise notice 'leasectl: % may not give % to %', current_user, p_function, public.leasectl_schema_owner();
end $$;
revoke all on function public.leasectl_give_to_owner(regprocedure) from public;

do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        grant execute on function public.leasectl_operator_revoke_grant(uuid, text, text)
            to leasectl_operator, leasectl_supervisor;
    end if;
end $$;
select public.leasectl_give_to_owner('public.leasectl_operator_revoke_grant(uuid, text, text)');

insert into leasectl_migrations (version, name) values (17, '0017_operator_revoke')
on conflict (version) do nothing;
