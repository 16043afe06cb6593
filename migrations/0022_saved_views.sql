-- 0022: saved views (issue 30, "The team's tools"): a screen's filter kept under a name, for the
-- login that saved it (personal) or for every console login (shared).
--
--   saved_views   name, screen, filter, created_by, shared, created_at (the contract), plus
--                 db_role: the database login that saved it, recorded by the database (the
--                 column's default is session_user, the insert trigger forces it, and no login
--                 is granted the column); updated_by / updated_at: the last replacement.
--
-- Who sees and changes what is the database's rule, not the console's (row level security keyed
-- on session_user, the login: a read-only console's SET ROLE leasectl_auditor keeps its login, so
-- it still sees its own personal views):
--   * read: every shared view, and the personal views whose db_role is this login;
--   * save, replace, delete: only the views whose db_role is this login. Someone else's shared
--     view is refused (zero rows; queries/saved_views/*.sql say so), unless the session is one row
--     level security does not bind: the schema owner or a superuser, who may tidy up after a
--     login that left;
--   * leasectl_operator saves, replaces and deletes; leasectl_auditor (and a read-only console,
--     which takes that role) lists and opens, nothing else; leasectl_worker and
--     leasectl_supervisor get nothing: a worker login cannot read or write a view.
--
-- Names. A view is named by its name alone, whatever its screen (`leasectl views delete NAME`
-- needs nothing else): unique per login among its personal views, unique among the shared views
-- (one team, one meaning for `payments-stuck`). A personal view may have the name of a shared one;
-- the console marks which is which and `views delete NAME --shared` says which one goes.
--
-- The filter is kept as typed, in its screen's grammar (console/core/filters.py and audit.py).
-- The database does not parse it: the grammar is the console's, and a view saved before a key
-- was renamed must stay readable so that the console can say why it no longer applies
-- (console/core/saved_views.py: `problem`), never quietly match nothing.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every function follows
-- 0012's rule (search_path = pg_catalog, public, pg_temp; every name schema-qualified).

create table public.saved_views (
    id          bigint generated always as identity primary key,
    name        text not null
                check (length(name) between 1 and 60 and name = btrim(name) and name !~ '[[:cntrl:]]'),
    -- the console's screens that have a `/` filter (its modes: console/operator/tui/app.py)
    screen      text not null
                check (screen in ('triage', 'calls', 'approvals', 'fleet', 'reconciliations', 'audit', 'chains')),
    filter      text not null
                check (length(filter) between 1 and 1000 and btrim(filter) <> '' and filter !~ '[[:cntrl:]]'),
    shared      boolean not null default false,
    created_by  text not null check (length(created_by) between 1 and 200),
    created_at  timestamptz not null default now(),
    db_role     text not null default session_user,
    updated_by  text check (length(updated_by) between 1 and 200),
    updated_at  timestamptz
);

comment on table public.saved_views is
    'Saved views: a screen''s filter under a name, personal (its login''s alone) or shared (every console login).';
comment on column public.saved_views.created_by is
    'The operator name that saved it, as the journal has it (given by the client)';
comment on column public.saved_views.db_role is
    'The database login that saved it (set by the database): it alone may replace or delete the view';
comment on column public.saved_views.filter is
    'The filter as typed, in its screen''s grammar; the console says when it no longer parses';

-- a name names one view: per login among its personal ones, once among the shared ones
create unique index saved_views_personal_name on public.saved_views (db_role, name) where not shared;
create unique index saved_views_shared_name on public.saved_views (name) where shared;

-- db_role is the login's, whatever a client sends; a replacement keeps who made the view and when,
-- and says when it was replaced. The schema owner and superusers (leasectl_is_exempt) may name the
-- login of a view they make for it.
create function public.leasectl_saved_views_stamp() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if tg_op = 'INSERT' then
        if new.db_role is null or not public.leasectl_is_exempt() then
            new.db_role := session_user;
        end if;
        new.updated_by := null;
        new.updated_at := null;
    else
        if not public.leasectl_is_exempt() then
            new.db_role := old.db_role;
            new.created_by := old.created_by;
            new.created_at := old.created_at;
        end if;
        new.updated_at := pg_catalog.now();
    end if;
    return new;
end $$;

create trigger saved_views_stamp
    before insert or update on public.saved_views
    for each row execute function public.leasectl_saved_views_stamp();

-- Row level security: the rule above, keyed on the login (session_user). WITH CHECK runs after
-- the trigger, so an insert always passes as its own login's and nothing else.
alter table public.saved_views enable row level security;
create policy saved_views_read on public.saved_views for select
    using (shared or db_role = session_user);
create policy saved_views_insert on public.saved_views for insert
    with check (db_role = session_user);
create policy saved_views_update on public.saved_views for update
    using (db_role = session_user) with check (db_role = session_user);
create policy saved_views_delete on public.saved_views for delete
    using (db_role = session_user);

revoke all on public.saved_views from public;
revoke all on function public.leasectl_saved_views_stamp() from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        -- by column: a login never names db_role, created_at or the id; a replacement changes the
        -- screen, the filter and who replaced it, never the name, the scope or the owner
        grant select, delete on public.saved_views to leasectl_operator;
        grant insert (name, screen, filter, shared, created_by) on public.saved_views to leasectl_operator;
        grant update (screen, filter, updated_by) on public.saved_views to leasectl_operator;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_auditor') then
        grant select on public.saved_views to leasectl_auditor;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (22, '0022_saved_views')
on conflict (version) do nothing;
