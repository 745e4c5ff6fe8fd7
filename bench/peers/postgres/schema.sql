-- The dedup protocol's table for the PostgreSQL 15 peer. One row per key;
-- times are server milliseconds; fences come from one sequence so they rise
-- even after a row expired and was created again.
-- The statements (INSERT ... ON CONFLICT for Begin, UPDATE ... WHERE fence =
-- $n for Complete) are prepared by bench/load/pg_backend.cc.
DROP TABLE IF EXISTS dedup;
DROP SEQUENCE IF EXISTS dedup_fence;
CREATE SEQUENCE dedup_fence;
CREATE TABLE dedup (
  k text PRIMARY KEY,         -- namespace ':' key
  st smallint NOT NULL,       -- 1 in flight, 2 completed
  fence bigint NOT NULL,
  args text NOT NULL,
  owner text NOT NULL,
  lease_until bigint NOT NULL,
  expires bigint NOT NULL,    -- never before lease_until
  outcome smallint NOT NULL DEFAULT 0,
  result text
);
