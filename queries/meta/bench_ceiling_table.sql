-- Purpose: the table pgbench updates to measure the machine's ceiling (single-row UPDATE
--   commits per second) in the protocol benchmark. Benchmark databases only.
-- Zero rows: always.
-- Parameters: none
do $$
begin
    create table bench_ceiling (id integer primary key, v integer not null);
    insert into bench_ceiling select g, 0 from generate_series(1, 1000) g;
end $$
