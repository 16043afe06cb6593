-- Purpose: benchmarks only (tests/bench/scale.py): put the lease watch (migration 0020) back to
--   -infinity, as on a database no supervisor has swept, so that every claim searches for an
--   expired lease as claims did before 0020. Run as the schema's owner; the next sweep raises it.
-- Zero rows: always (an update without RETURNING).
-- Parameters: none
update leasectl_lease_watch set next_expiry = '-infinity', epoch = epoch + 1
