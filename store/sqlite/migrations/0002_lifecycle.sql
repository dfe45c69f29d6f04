-- The order lifecycle: confirmed orders are paid, cancelled or expired, and
-- the units of cancelled and expired orders go back on sale.
--
-- activities.pay_within_ms is the payment window (0: no payment step);
-- rebuy lets a buyer whose order was returned buy again. Existing
-- activities keep what they had: no payment step, and rebuy (a failed
-- order never blocked a buyer). remaining now also grows: a returned unit
-- adds one, in the transaction that closes its order.
ALTER TABLE activities ADD COLUMN pay_within_ms BIGINT NOT NULL DEFAULT 0 CHECK (pay_within_ms >= 0);
ALTER TABLE activities ADD COLUMN rebuy BOOLEAN NOT NULL DEFAULT TRUE;

-- orders now holds every order the database created, in its state:
-- confirmed, paid, cancelled or expired. Each state change is one
-- conditional UPDATE from confirmed. holder_user_id is user_id while the
-- order keeps its buyer from buying again in the activity (live, or
-- returned in an activity without rebuy), NULL otherwise; its UNIQUE index
-- is the duplicate guard (NULLs never conflict). SQLite cannot drop the old
-- UNIQUE (activity_id, user_id) constraint nor add constraints, so the
-- table is rebuilt (nothing references it yet).
CREATE TABLE orders_new (
    id             INTEGER PRIMARY KEY,
    activity_id    BIGINT NOT NULL REFERENCES activities (id),
    user_id        BIGINT NOT NULL,
    status         VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    holder_user_id BIGINT NULL,
    pay_by         TEXT NULL,     -- payment deadline; NULL without a payment step
    paid_at        TEXT NULL,
    payment_ref    VARCHAR(128) NULL,
    pay_key        VARCHAR(128) NULL, -- idempotency key of the paying call
    closed_at      TEXT NULL,     -- when it was cancelled or expired
    CONSTRAINT orders_status_check CHECK (status IN ('confirmed', 'paid', 'cancelled', 'expired')),
    CONSTRAINT orders_holder_check CHECK (CASE WHEN holder_user_id IS NULL THEN status IN ('cancelled', 'expired')
                                               ELSE holder_user_id = user_id END)
);
INSERT INTO orders_new (id, activity_id, user_id, status, created_at, holder_user_id)
SELECT id, activity_id, user_id, status, created_at, user_id FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;

CREATE UNIQUE INDEX orders_activity_holder_key ON orders (activity_id, holder_user_id);
-- Expiry reads the confirmed orders awaiting payment by deadline.
CREATE INDEX orders_pay_by_idx ON orders (pay_by, id) WHERE status = 'confirmed' AND pay_by IS NOT NULL;
-- A user's orders, newest first.
CREATE INDEX orders_user_created_idx ON orders (user_id, created_at, id);
CREATE INDEX order_failures_user_created_idx ON order_failures (user_id, created_at, order_id);

-- order_returns records each unit given back, in the transaction of the
-- order's change to cancelled or expired (remaining + 1): one row per
-- order, so a unit is returned once. restocked_at is set once Redis got
-- the unit back too; until then the row is in the outbox that the expiry
-- job repairs. fence is the expiry leader's token (NULL for a cancel).
CREATE TABLE order_returns (
    order_id     INTEGER PRIMARY KEY REFERENCES orders (id),
    activity_id  BIGINT NOT NULL REFERENCES activities (id),
    user_id      BIGINT NOT NULL,
    status       VARCHAR(16) NOT NULL,
    fence        BIGINT NULL,
    returned_at  TEXT NOT NULL,
    restocked_at TEXT NULL,
    CONSTRAINT order_returns_status_check CHECK (status IN ('cancelled', 'expired'))
);
CREATE INDEX order_returns_pending_idx ON order_returns (returned_at, order_id) WHERE restocked_at IS NULL;
CREATE INDEX order_returns_activity_id_idx ON order_returns (activity_id);

-- fences holds the highest fencing token seen for each lock name: a write
-- under a lower token is refused (a leader that lost its lock).
CREATE TABLE fences (
    name  VARCHAR(64) PRIMARY KEY,
    token BIGINT NOT NULL
);
