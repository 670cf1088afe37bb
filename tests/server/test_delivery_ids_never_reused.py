"""A webhook delivery's id (the ``X-Danlu-Delivery`` header an endpoint drops repeats by) is
never handed out twice: not after the done deliveries were purged, not after the webhook
holding the newest was removed, and not after an upgrade from revision 0034 (whose SQLite
table took the largest id left plus one) with deliveries in the store."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, select, text, update

from danlu.server.db import Database, WebhookDelivery, head_revision, make_engine
from danlu.server.db import upgrade_database as migrate
from danlu.server.db.migrate import alembic_config
from danlu.server.services import users, webhooks

NOW = 1_000_000.0
LONG_AGO = NOW - webhooks.KEEP_DONE_SECONDS - 60
URL = "https://hooks.example/danlu"


def _ids(db: Database) -> list[int]:
    with db.read_session() as s:
        return list(s.scalars(select(WebhookDelivery.id).order_by(WebhookDelivery.id)))


def test_a_delivery_after_a_purge_of_every_one_gets_a_new_id(db: Database) -> None:
    with db.session() as s:
        users.create_user(s, "root", "admin", now=NOW)
        hook = webhooks.create(s, URL, "root", now=NOW).id
        earlier = [webhooks.ping(s, hook, now=NOW).id for _ in range(3)]
        s.execute(update(WebhookDelivery).values(done_at=LONG_AGO, delivered=True))
    with db.session() as s:
        assert webhooks.purge(s, NOW) == 3
    assert _ids(db) == []
    with db.session() as s:
        new = webhooks.ping(s, hook, now=NOW).id
    assert new > max(earlier)


def test_a_delivery_after_the_newest_ones_webhook_was_removed_gets_a_new_id(
    db: Database,
) -> None:
    with db.session() as s:
        users.create_user(s, "root", "admin", now=NOW)
        kept = webhooks.create(s, URL, "root", now=NOW).id
        removed = webhooks.create(s, URL + "/other", "root", now=NOW).id
        first = webhooks.ping(s, kept, now=NOW).id
        newest = [webhooks.ping(s, removed, now=NOW).id for _ in range(2)]
    with db.session() as s:
        webhooks.remove(s, removed)
    assert _ids(db) == [first]
    with db.session() as s:
        new = webhooks.ping(s, kept, now=NOW).id
    assert new > max(newest)


def _at_0034_with_deliveries(engine: Engine) -> list[int]:
    """Migrate ``engine``'s empty database to 0034 and write a webhook and three deliveries
    in plain SQL (the ids 1-3): returns their ids."""
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0034")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO webhooks (id, url, secret, states, created_at, created_by) "
                f"VALUES ('abc', '{URL}', 's', '[\"FAILED\"]', 1, 'root')"
            )
        )
        for _ in range(3):
            conn.execute(
                text(
                    "INSERT INTO webhook_deliveries (webhook_seq, kind, payload, created_at,"
                    " attempts, next_attempt_at) VALUES ((SELECT seq FROM webhooks), 'ping',"
                    " '{}', 1, 0, 1)"
                )
            )
        return list(conn.execute(text("SELECT id FROM webhook_deliveries ORDER BY id")).scalars())


def test_an_upgrade_from_0034_keeps_the_deliveries_and_never_reuses_their_ids(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    try:
        before = _at_0034_with_deliveries(engine)
        assert len(before) == 3
        migrate(engine)
        db = Database(fresh_url)
        try:
            with db.read_session() as s:
                kept = s.execute(
                    select(WebhookDelivery.id, WebhookDelivery.kind).order_by(WebhookDelivery.id)
                ).all()
            assert [tuple(row) for row in kept] == [(i, "ping") for i in before]
            with db.session() as s:
                s.execute(update(WebhookDelivery).values(done_at=LONG_AGO, delivered=True))
            with db.session() as s:
                assert webhooks.purge(s, NOW) == 3
                new = webhooks.ping(s, "abc", now=NOW).id
            assert new > max(before)
            # and down to 0034 and up again, the rows still there
            config = alembic_config()
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.downgrade(config, "0034")
            assert _ids(db) == [new]
            migrate(engine)
            with db.session() as s:
                assert webhooks.ping(s, "abc", now=NOW).id > new
        finally:
            db.dispose()
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert version == head_revision()
    finally:
        engine.dispose()
