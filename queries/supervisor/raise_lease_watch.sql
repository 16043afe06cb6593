-- Purpose: after a sweep, move the lease watch (migration 0020) up to the earliest time a running
--   call's lease can run out, so that claims skip their search for expired leases until then.
--   Never later than now() + the shortest lease a tool grants - 2 s; a lowering committed since
--   this statement's snapshot wins.
-- Zero rows: the watch was lowered meanwhile (a lease shortened or a tool changed); it stays
--   where it is, and the next sweep raises it.
-- Parameters: none
select w.next_expiry from public.leasectl_raise_lease_watch() as w(next_expiry)
