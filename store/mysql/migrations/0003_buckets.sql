-- activities.buckets splits an activity's stock in Redis into that many
-- buckets, each under a hash tag of its own (see package stock): one sale
-- over several Redis Cluster masters. Existing activities have one.
--
-- As in 0002: the ALTER runs only if the column is missing (MySQL has no
-- ADD COLUMN IF NOT EXISTS), so the file can run again after a failure.
SET @ddl = IF((SELECT COUNT(*) FROM information_schema.columns
               WHERE table_schema = DATABASE() AND table_name = 'activities' AND column_name = 'buckets') = 0,
    'ALTER TABLE activities
         ADD COLUMN buckets INT NOT NULL DEFAULT 1,
         ADD CONSTRAINT activities_buckets_check CHECK (buckets BETWEEN 1 AND 256)',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
