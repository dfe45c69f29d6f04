-- The system of record of seckill. Outside checks and operators read these
-- tables directly: keep table and column names stable.
--
-- Times are DATETIME(3) holding UTC (the store's sessions run with
-- time_zone '+00:00'); TIMESTAMP would end in 2038. MySQL commits DDL
-- statement by statement, so each is written to be safe to run again after
-- a failure halfway.

-- activities are immutable once created, except remaining, which only
-- ApplyOrders changes.
CREATE TABLE IF NOT EXISTS activities (
    id         BIGINT NOT NULL AUTO_INCREMENT,
    name       VARCHAR(200) NOT NULL,
    stock      BIGINT NOT NULL,
    remaining  BIGINT NOT NULL,
    starts_at  DATETIME(3) NOT NULL,
    ends_at    DATETIME(3) NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    CONSTRAINT activities_stock_check CHECK (stock > 0),
    CONSTRAINT activities_remaining_check CHECK (remaining >= 0 AND remaining <= stock)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- orders holds confirmed orders only; the id comes from the application.
CREATE TABLE IF NOT EXISTS orders (
    id          BIGINT NOT NULL,
    activity_id BIGINT NOT NULL,
    user_id     BIGINT NOT NULL,
    status      VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    created_at  DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY orders_activity_user_key (activity_id, user_id),
    CONSTRAINT orders_activity_id_fkey FOREIGN KEY (activity_id) REFERENCES activities (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- order_failures holds orders that were not created; a failed order leaves
-- no row in orders, so the buyer may grab again. No foreign key: a request
-- for an activity that does not exist is recorded as sold out.
CREATE TABLE IF NOT EXISTS order_failures (
    order_id          BIGINT NOT NULL,
    activity_id       BIGINT NOT NULL,
    user_id           BIGINT NOT NULL,
    reason            VARCHAR(32) NOT NULL,
    existing_order_id BIGINT NULL,
    created_at        DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (order_id),
    KEY order_failures_activity_id_idx (activity_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
