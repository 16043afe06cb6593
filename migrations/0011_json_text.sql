-- 0011: values written as JSON text the way leasectl's Python writes them, for statements that
-- build their output on the server (queries/audit/jobs_at.sql: every call as it was at an instant,
-- which `leasectl jobs --at --json` streams as the server wrote it, 100,000 calls and more).
--
-- All three are plain SQL expressions, stable and not strict: the planner inlines them into the
-- statement (no function call per value). Each gives JSON text, `null` for a null.

-- A time as pydantic writes a UTC datetime: ISO 8601, microseconds unless they are zero, `Z`.
create function leasectl_json_time(p_at timestamptz) returns text
language sql stable parallel safe as $$
    select coalesce('"' || replace(to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '')
                    || 'Z"', 'null')
$$;

-- A string as Python's json.dumps writes it: PostgreSQL escapes `"`, `\` and the control characters
-- below 0x20 exactly as Python does (\n, \t, ..., else \u00XX in lower case); a non-ASCII character
-- is left as it is, for the reader to escape (Python writes \uXXXX: ensure_ascii).
create function leasectl_json_text(p_value text) returns text
language sql stable parallel safe as $$
    select coalesce(to_json(p_value)::text, 'null')
$$;

-- A float as Python's repr writes it, for the values leasectl writes (seconds: lease sizing, time
-- left, below 1e15 in magnitude, never -0): the same shortest digits PostgreSQL writes (both print
-- the shortest text that reads back as the same double), but a whole number keeps `.0`
-- (PostgreSQL writes 60, Python 60.0) and does not turn to an exponent below 1e16 (PostgreSQL
-- writes 1e+15). Not repr beyond that: a fraction at 1e15 or more gets PostgreSQL's exponent.
create function leasectl_json_float(p_value float8) returns text
language sql stable parallel safe as $$
    select case when p_value is null then 'null'
                when p_value = trunc(p_value) and abs(p_value) < 1e16 then trunc(p_value)::bigint::text || '.0'
                else p_value::text end
$$;

insert into leasectl_migrations (version, name) values (11, '0011_json_text')
on conflict (version) do nothing;
