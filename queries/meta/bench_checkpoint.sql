-- Purpose: benchmark servers only: write every dirty buffer out now, so that a timed run never
--   inherits a checkpoint (its buffer writes and the full-page images every first change of a
--   page then costs) that an earlier run's WAL set off.
-- Zero rows: always.
-- Parameters: none
checkpoint
