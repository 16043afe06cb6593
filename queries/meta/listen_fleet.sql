-- Purpose: subscribe this (dedicated) connection to changes of the fleet: agents changing
--   state, shutdowns requested or advancing, grants issued or revoked (channel leasectl_fleet).
-- Zero rows: always.
-- Parameters: none
listen leasectl_fleet
