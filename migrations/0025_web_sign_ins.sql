-- 0025: the web console's sign-in journal (issue 31, "Web"): every attempt to sign in to
-- `leasectl serve`, every sign-out and every session that expired, kept by the database.
--
--   web_sign_ins   id, at, person (the name typed or the proxy's header, as received, cut to 200
--                  characters), outcome, remote (the browser's address as the server saw it),
--                  reason (why refused), db_role (session_user: the login of the serve process
--                  that wrote it, set by the database).
--
-- Who writes: only through leasectl_record_sign_in(), a SECURITY DEFINER function granted to the
-- group role leasectl_web (the serve process's login is a member: README "The console in a
-- browser") -- no login inserts a row it chose freely, none updates or deletes one (append-only,
-- the owner's included, as the other journals). Who reads: leasectl_operator and
-- leasectl_auditor (`leasectl audit sign-ins`). A worker or supervisor login reads nothing.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every function follows
-- 0012's rule (search_path = pg_catalog, public, pg_temp; every name schema-qualified).

do $$
begin
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_web') then
        begin
            execute 'create role leasectl_web nologin';
        exception when insufficient_privilege then
            raise notice 'leasectl: % may not create role leasectl_web; skipping it', current_user;
        end;
    end if;
end $$;

create table public.web_sign_ins (
    id       bigint generated always as identity primary key,
    at       timestamptz not null default now(),
    person   text not null check (length(person) <= 200),
    outcome  text not null check (outcome in ('signed_in', 'refused', 'rate_limited', 'signed_out', 'expired')),
    remote   text not null check (length(remote) <= 200),
    reason   text check (length(reason) <= 500),
    db_role  text not null default session_user
);

comment on table public.web_sign_ins is
    'The web console''s sign-ins: every attempt (signed_in, refused, rate_limited), sign-out and expired session.';
comment on column public.web_sign_ins.person is
    'The name given at sign-in (typed, or the trusted proxy''s header), as received: a refused one may name nobody';
comment on column public.web_sign_ins.db_role is 'The login of the serve process that wrote the row (set by the database)';

create index web_sign_ins_at_idx on public.web_sign_ins (at desc);
create index web_sign_ins_person_at_idx on public.web_sign_ins (person, at desc);

create trigger web_sign_ins_append_only
    before update or delete on public.web_sign_ins
    for each statement execute function public.leasectl_fleet_append_only();
create trigger web_sign_ins_no_truncate
    before truncate on public.web_sign_ins
    for each statement execute function public.leasectl_fleet_append_only();

-- The one way in: the database stamps the time and the login; the text is cut, never refused (a
-- refused attempt with a 10 kB name is still journaled), and control characters are replaced so
-- that a name typed to forge a line of a log cannot.
create function public.leasectl_record_sign_in(p_person text, p_outcome text, p_remote text, p_reason text)
returns bigint
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_id bigint;
begin
    insert into public.web_sign_ins (person, outcome, remote, reason, db_role)
    values (pg_catalog.left(pg_catalog.regexp_replace(coalesce(p_person, ''), '[[:cntrl:]]', '?', 'g'), 200),
            p_outcome,
            pg_catalog.left(pg_catalog.regexp_replace(coalesce(p_remote, ''), '[[:cntrl:]]', '?', 'g'), 200),
            pg_catalog.left(pg_catalog.regexp_replace(p_reason, '[[:cntrl:]]', '?', 'g'), 500),
            session_user)
    returning id into v_id;
    return v_id;
end $$;

revoke all on public.web_sign_ins from public;
revoke all on function public.leasectl_record_sign_in(text, text, text, text) from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_web') then
        grant execute on function public.leasectl_record_sign_in(text, text, text, text) to leasectl_web;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        grant select on public.web_sign_ins to leasectl_operator;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_auditor') then
        grant select on public.web_sign_ins to leasectl_auditor;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (25, '0025_web_sign_ins')
on conflict (version) do nothing;
