-- The order lifecycle: confirmed orders are paid, cancelled or expired, and
-- the units of cancelled and expired orders go back on sale.
--
-- MySQL commits each DDL statement on its own and has no ADD COLUMN IF NOT
-- EXISTS (MariaDB has; MySQL 8 has not), so each ALTER runs only if what it
-- adds is missing (a prepared statement chosen from information_schema):
-- after a failure halfway the file runs again from the top. Each ALTER is
-- one statement, done whole or not at all.

-- activities.pay_within_ms is the payment window (0: no payment step);
-- rebuy lets a buyer whose order was returned buy again. Existing
-- activities keep what they had: no payment step, and rebuy (a failed
-- order never blocked a buyer). remaining now also grows: a returned unit
-- adds one, in the transaction that closes its order.
SET @ddl = IF((SELECT COUNT(*) FROM information_schema.columns
               WHERE table_schema = DATABASE() AND table_name = 'activities' AND column_name = 'rebuy') = 0,
    'ALTER TABLE activities
         ADD COLUMN pay_within_ms BIGINT NOT NULL DEFAULT 0,
         ADD COLUMN rebuy BOOLEAN NOT NULL DEFAULT TRUE,
         ADD CONSTRAINT activities_pay_within_check CHECK (pay_within_ms >= 0)',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;

-- orders now holds every order the database created, in its state:
-- confirmed, paid, cancelled or expired. Each state change is one
-- conditional UPDATE from confirmed. pay_by is the payment deadline (NULL
-- without a payment step), pay_key the idempotency key of the paying call,
-- closed_at when the order was cancelled or expired.
SET @ddl = IF((SELECT COUNT(*) FROM information_schema.columns
               WHERE table_schema = DATABASE() AND table_name = 'orders' AND column_name = 'holder_user_id') = 0,
    'ALTER TABLE orders
         ADD COLUMN holder_user_id BIGINT NULL,
         ADD COLUMN pay_by DATETIME(3) NULL,
         ADD COLUMN paid_at DATETIME(3) NULL,
         ADD COLUMN payment_ref VARCHAR(128) NULL,
         ADD COLUMN pay_key VARCHAR(128) NULL,
         ADD COLUMN closed_at DATETIME(3) NULL',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;

-- Every existing order is confirmed and holds its buyer.
UPDATE orders SET holder_user_id = user_id WHERE holder_user_id IS NULL AND status = 'confirmed';

-- holder_user_id is user_id while the order keeps its buyer from buying
-- again in the activity (live, or returned in an activity without rebuy),
-- NULL otherwise; its UNIQUE key is the duplicate guard (NULLs never
-- conflict) and replaces orders_activity_user_key (the foreign key on
-- activity_id uses the new one). Expiry reads the confirmed orders by
-- deadline (status, pay_by; InnoDB appends id); a user's orders are read
-- newest first.
SET @ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
               WHERE table_schema = DATABASE() AND table_name = 'orders' AND index_name = 'orders_activity_holder_key') = 0,
    'ALTER TABLE orders
         ADD UNIQUE KEY orders_activity_holder_key (activity_id, holder_user_id),
         DROP INDEX orders_activity_user_key,
         ADD KEY orders_pay_by_idx (status, pay_by),
         ADD KEY orders_user_created_idx (user_id, created_at, id),
         ADD CONSTRAINT orders_status_check CHECK (status IN (''confirmed'', ''paid'', ''cancelled'', ''expired'')),
         ADD CONSTRAINT orders_holder_check CHECK (CASE WHEN holder_user_id IS NULL THEN status IN (''cancelled'', ''expired'')
                                                        ELSE holder_user_id = user_id END)',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;

SET @ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
               WHERE table_schema = DATABASE() AND table_name = 'order_failures' AND index_name = 'order_failures_user_created_idx') = 0,
    'ALTER TABLE order_failures ADD KEY order_failures_user_created_idx (user_id, created_at, order_id)',
    'DO 0');
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;

-- order_returns records each unit given back, in the transaction of the
-- order's change to cancelled or expired (remaining + 1): one row per
-- order, so a unit is returned once. restocked_at is set once Redis got
-- the unit back too; until then the row is in the outbox that the expiry
-- job repairs (read by restocked_at IS NULL, oldest first). fence is the
-- expiry leader's token (NULL for a cancel).
CREATE TABLE IF NOT EXISTS order_returns (
    order_id     BIGINT NOT NULL,
    activity_id  BIGINT NOT NULL,
    user_id      BIGINT NOT NULL,
    status       VARCHAR(16) NOT NULL,
    fence        BIGINT NULL,
    returned_at  DATETIME(3) NOT NULL,
    restocked_at DATETIME(3) NULL,
    PRIMARY KEY (order_id),
    KEY order_returns_pending_idx (restocked_at, returned_at, order_id),
    KEY order_returns_activity_id_idx (activity_id),
    CONSTRAINT order_returns_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT order_returns_activity_id_fkey FOREIGN KEY (activity_id) REFERENCES activities (id),
    CONSTRAINT order_returns_status_check CHECK (status IN ('cancelled', 'expired'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- fences holds the highest fencing token seen for each lock name: a write
-- under a lower token is refused (a leader that lost its lock).
CREATE TABLE IF NOT EXISTS fences (
    name  VARCHAR(64) NOT NULL,
    token BIGINT NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
