-- activities.queue_rate puts a waiting room in front of the sale (see
-- package queue): the most buyers it admits a second, 0 for none.
-- queue_hold bounds the buyers admitted and not yet bought by that many for
-- each unit left (0: the rate alone). Existing activities have no waiting
-- room.
ALTER TABLE activities ADD COLUMN queue_rate INTEGER NOT NULL DEFAULT 0 CHECK (queue_rate BETWEEN 0 AND 1000000);
ALTER TABLE activities ADD COLUMN queue_hold INTEGER NOT NULL DEFAULT 0 CHECK (queue_hold BETWEEN 0 AND 100);
