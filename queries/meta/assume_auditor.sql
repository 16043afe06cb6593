-- Purpose: a read-only console drops to the leasectl_auditor role when it may: read-only by
--   privilege, not only by default_transaction_read_only (which any session can turn off).
-- Zero rows: the session's role is not a member of leasectl_auditor; it stays as it is.
-- Parameters: none
select set_config('role', 'leasectl_auditor', false) as role
where exists (select 1 from pg_roles where rolname = 'leasectl_auditor')
  and pg_has_role(current_user, 'leasectl_auditor', 'MEMBER')
