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

insert into leasectl_migrations (version, name) values (3, '0003_console')
on conflict (version) do nothing;
