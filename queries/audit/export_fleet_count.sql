-- Purpose: how many fleet_events rows `leasectl audit export --fleet` will write for this range
--   (read in the export's own snapshot, so the count and the rows agree), and the first and last
--   instant. Each null means no filter.
-- Zero rows: never (one row; events = 0 when the range is empty).
-- Parameters: since, until
select count(*)::bigint as events, min(f.at) as first_at, max(f.at) as last_at
from fleet_events f
where (:since::timestamptz is null or f.at >= :since::timestamptz)
  and (:until::timestamptz is null or f.at <= :until::timestamptz)
