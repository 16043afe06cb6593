-- Purpose: whether this login may journal sign-ins (leasectl_record_sign_in, migration 0025): asked by
--   `leasectl serve` before it listens, so that nobody learns at their sign-in that none is possible.
-- Zero rows: never (one row: may is true or false).
-- Parameters: none
select pg_catalog.has_function_privilege('public.leasectl_record_sign_in(text, text, text, text)', 'execute') as may
