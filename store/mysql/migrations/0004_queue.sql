-- activities.queue_rate puts a waiting room in front of the sale (see
-- package queue): the most buyers it admits a second, 0 for none.
-- queue_hold bounds the buyers admitted and not yet bought by that many for
-- each unit left (0: the rate alone). Existing activities have no waiting
-- room.
--
-- As in 0002: the ALTER runs only if the columns are missing (MySQL has no
-- ADD COLUMN IF NOT EXISTS), so the file can run again after a failure.
SET @ddl = IF((SELECT COUNT(*) FROM information_schema.columns
               WHERE table_schema = DATABASE() AND table_name = 'activities' AND column_name = 'queue_rate') = 0,
    'ALTER TABLE activities
         ADD COLUMN queue_rate INT NOT NULL DEFAULT 0,
         ADD COLUMN queue_hold INT NOT NULL DEFAULT 0,
         ADD CONSTRAINT activities_queue_rate_check CHECK (queue_rate BETWEEN 0 AND 1000000),
         ADD CONSTRAINT activities_queue_hold_check CHECK (queue_hold BETWEEN 0 AND 100)',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
