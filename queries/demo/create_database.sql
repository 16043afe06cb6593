-- Purpose: create the demo's database on the embedded server.
-- Zero rows: always.
-- Parameters: none
create database leasectl_demo
