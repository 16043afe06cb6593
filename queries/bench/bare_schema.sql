-- Purpose: benchmark databases only: the seed's bare shape (docs/seeds.md §000) that the protocol
--   benchmark compares the reference worker with -- the seed's tool_jobs table, its columns
--   only, with no triggers, no history, no NOTIFY and no row level security; plus the one
--   partial index the seed's claim needs so that it does not scan finished rows. Its own table
--   (bare_jobs) in a database of its own.
-- Zero rows: always.
-- Parameters: none
do $$
begin
    create table bare_jobs (
        id uuid primary key,
        state text not null check (state in ('queued', 'running', 'succeeded', 'failed')),
        owner_id text,
        lease_until timestamptz,
        fencing_token bigint not null default 0,
        heartbeat_at timestamptz,
        attempt integer not null default 0,
        idempotency_key text not null unique,
        payload jsonb not null,
        result jsonb,
        error jsonb
    );
    create index bare_jobs_claimable_idx on bare_jobs (id) where state in ('queued', 'running');
end $$
