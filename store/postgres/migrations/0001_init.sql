-- The system of record of seckill. Outside checks and operators read these
-- tables directly: keep table and column names stable.

-- activities are immutable once created, except remaining, which only
-- ApplyOrders changes. Identity values are never reused, so an id never
-- names two activities (Redis keys are derived from it).
CREATE TABLE activities (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    stock      BIGINT NOT NULL CHECK (stock > 0),
    remaining  BIGINT NOT NULL,
    starts_at  TIMESTAMPTZ(3) NOT NULL,
    ends_at    TIMESTAMPTZ(3) NOT NULL,
    created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
    CONSTRAINT activities_remaining_check CHECK (remaining >= 0 AND remaining <= stock)
);

-- orders holds confirmed orders only; the id comes from the application.
CREATE TABLE orders (
    id          BIGINT PRIMARY KEY,
    activity_id BIGINT NOT NULL REFERENCES activities (id),
    user_id     BIGINT NOT NULL,
    status      VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    created_at  TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
    CONSTRAINT orders_activity_user_key UNIQUE (activity_id, user_id)
);

-- order_failures holds orders that were not created; a failed order leaves
-- no row in orders, so the buyer may grab again. No foreign key: a request
-- for an activity that does not exist is recorded as sold out.
CREATE TABLE order_failures (
    order_id          BIGINT PRIMARY KEY,
    activity_id       BIGINT NOT NULL,
    user_id           BIGINT NOT NULL,
    reason            VARCHAR(32) NOT NULL,
    existing_order_id BIGINT NULL,
    created_at        TIMESTAMPTZ(3) NOT NULL DEFAULT now()
);

CREATE INDEX order_failures_activity_id_idx ON order_failures (activity_id);
