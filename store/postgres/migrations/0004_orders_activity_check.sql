-- Every order names an activity that exists: the foreign key from orders to
-- activities made sure of it one order at a time, with a query of its own
-- for each inserted row (a lookup and a FOR KEY SHARE lock of the activity
-- row): 38% of the database's time when a worker writes a backlog of
-- orders (measured: 45,000 to 51,000 orders/s with it, 62,000 to 64,000
-- without). The same rules are checked here once per statement:
--
-- - an insert locks the activities its rows name FOR KEY SHARE, as the
--   foreign key did (an activity cannot be deleted, nor its id changed,
--   before the inserting transaction ends), and fails with
--   foreign_key_violation if one of them does not exist;
-- - an update of orders.activity_id checks the new activity the same way
--   (the store never changes it; the trigger fires only on an UPDATE whose
--   SET names the column);
-- - deleting an activity, or changing its id, fails while orders name it.
--
-- The one difference from the foreign key: a DELETE of an activity run at
-- REPEATABLE READ or SERIALIZABLE does not see orders that a concurrent
-- transaction inserted and committed after its snapshot began (at
-- SERIALIZABLE both transactions' reads make one of them fail instead).
-- The store never deletes activities.
ALTER TABLE orders DROP CONSTRAINT orders_activity_id_fkey;

-- The activities named by new_orders, the transition table of the
-- statement (or of one row, for an update), must exist; they are locked
-- FOR KEY SHARE until the transaction ends.
CREATE FUNCTION orders_activity_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted  bigint;
    locked  bigint;
    missing bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        PERFORM 1 FROM activities WHERE id = NEW.activity_id FOR KEY SHARE;
        IF NOT FOUND THEN
            missing := NEW.activity_id;
        END IF;
    ELSE
        SELECT count(*) INTO wanted FROM (SELECT DISTINCT activity_id FROM new_orders) AS n;
        SELECT count(*) INTO locked FROM (
            SELECT 1 FROM activities WHERE id IN (SELECT activity_id FROM new_orders) FOR KEY SHARE
        ) AS l;
        IF locked < wanted THEN
            SELECT n.activity_id INTO missing FROM new_orders AS n
            WHERE NOT EXISTS (SELECT 1 FROM activities AS a WHERE a.id = n.activity_id)
            LIMIT 1;
            missing := coalesce(missing, 0);
        END IF;
    END IF;
    IF missing IS NOT NULL THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'insert or update on table "orders" violates foreign key constraint "orders_activity_id_fkey"',
            DETAIL = format('Key (activity_id)=(%s) is not present in table "activities".', missing),
            TABLE = 'orders', CONSTRAINT = 'orders_activity_id_fkey';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_activity_id_fkey
    AFTER INSERT ON orders REFERENCING NEW TABLE AS new_orders
    FOR EACH STATEMENT EXECUTE FUNCTION orders_activity_check();
CREATE TRIGGER orders_activity_id_fkey_update
    AFTER UPDATE OF activity_id ON orders
    FOR EACH ROW WHEN (OLD.activity_id IS DISTINCT FROM NEW.activity_id) EXECUTE FUNCTION orders_activity_check();

-- An activity that orders name cannot be deleted, nor its id changed.
CREATE FUNCTION activities_orders_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM orders WHERE activity_id = OLD.id) THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('update or delete on table "activities" violates foreign key constraint "orders_activity_id_fkey" on table "orders"'),
            DETAIL = format('Key (id)=(%s) is still referenced from table "orders".', OLD.id),
            TABLE = 'activities', CONSTRAINT = 'orders_activity_id_fkey';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER activities_orders_check_delete
    BEFORE DELETE ON activities
    FOR EACH ROW EXECUTE FUNCTION activities_orders_check();
CREATE TRIGGER activities_orders_check_update
    BEFORE UPDATE OF id ON activities
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION activities_orders_check();
