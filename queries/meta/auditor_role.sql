-- Purpose: behind a connection pooler in transaction mode, whether a read-only session may drop to
--   the leasectl_auditor role, which meta/transaction_setup.sql then sets in each transaction
--   (meta/assume_auditor.sql sets it once for a session of our own, which a pooler cannot keep).
-- Zero rows: the login is not a member of leasectl_auditor: its transactions keep its own role.
-- Parameters: none
select 'leasectl_auditor' as role
where exists (select 1 from pg_roles where rolname = 'leasectl_auditor')
  and pg_has_role(current_user, 'leasectl_auditor', 'MEMBER')
