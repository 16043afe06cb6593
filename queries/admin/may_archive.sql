-- Purpose: `leasectl admin retention`, before it writes anything: whether this login may take the
--   last step (migration 0021's leasectl_archive_month is the schema owner's alone), so that a
--   login that may not is told at once, not after an hour of archiving.
-- Zero rows: never: one row.
-- Parameters: none
select has_function_privilege('leasectl_archive_month(date, bigint, bigint, bigint, text, text, text, text)',
                              'execute') as may_archive
