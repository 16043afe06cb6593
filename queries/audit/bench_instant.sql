-- Purpose: benchmark databases only (tests/bench/audit.py): the instant of the event at a given
--   position of the history (ids follow time there), to cut export ranges of a known size.
-- Zero rows: the history is shorter than that.
-- Parameters: position
select e.id, e.at from job_events e order by e.id offset :position::integer limit 1
