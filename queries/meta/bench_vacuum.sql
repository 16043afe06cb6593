-- Purpose: benchmark databases only: settle statistics and the visibility map after seeding.
-- Zero rows: always.
-- Parameters: none
vacuum analyze
