"""Alembic migrations of the danlu store (run by :func:`danlu.server.db.upgrade_database`)."""
