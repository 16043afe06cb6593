-- Purpose: make sure the migration ledger exists (0001 creates it too, for psql -f users).
-- Zero rows: always (DDL).
-- Parameters: none
create table if not exists leasectl_migrations (
    version     integer primary key,
    name        text not null,
    checksum    text,
    applied_at  timestamptz not null default now(),
    applied_by  text not null default current_user
)
