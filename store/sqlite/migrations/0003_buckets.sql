-- activities.buckets splits an activity's stock in Redis into that many
-- buckets, each under a hash tag of its own (see package stock): one sale
-- over several Redis Cluster masters. Existing activities have one.
ALTER TABLE activities ADD COLUMN buckets INTEGER NOT NULL DEFAULT 1 CHECK (buckets BETWEEN 1 AND 256);
