-- The system of record of seckill. Outside checks and operators read these
-- tables directly: keep table and column names stable.
--
-- Times are TEXT holding UTC as 'YYYY-MM-DD HH:MM:SS.SSS' (SQLite's own
-- format, understood by its date functions; fixed width, so comparing the
-- text compares the times). An INTEGER PRIMARY KEY is the rowid: the
-- application's order ids are stored as the rowid itself.

-- activities are immutable once created, except remaining, which only
-- ApplyOrders changes. AUTOINCREMENT: an id is never reused, so it never
-- names two activities (Redis keys are derived from it).
CREATE TABLE activities (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(200) NOT NULL,
    stock      BIGINT NOT NULL CHECK (stock > 0),
    remaining  BIGINT NOT NULL,
    starts_at  TEXT NOT NULL,
    ends_at    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    CONSTRAINT activities_remaining_check CHECK (remaining >= 0 AND remaining <= stock)
);

-- orders holds confirmed orders only; the id comes from the application.
CREATE TABLE orders (
    id          INTEGER PRIMARY KEY,
    activity_id BIGINT NOT NULL REFERENCES activities (id),
    user_id     BIGINT NOT NULL,
    status      VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    CONSTRAINT orders_activity_user_key UNIQUE (activity_id, user_id)
);

-- order_failures holds orders that were not created; a failed order leaves
-- no row in orders, so the buyer may grab again. No foreign key: a request
-- for an activity that does not exist is recorded as sold out.
CREATE TABLE order_failures (
    order_id          INTEGER PRIMARY KEY,
    activity_id       BIGINT NOT NULL,
    user_id           BIGINT NOT NULL,
    reason            VARCHAR(32) NOT NULL,
    existing_order_id BIGINT NULL,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE INDEX order_failures_activity_id_idx ON order_failures (activity_id);
