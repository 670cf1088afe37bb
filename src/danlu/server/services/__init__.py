"""The control plane's services: plain functions over a SQLAlchemy session.

Services flush but do not commit: the caller owns the transaction (``Database.session()``
commits at the end of the block), so a state change and its event land together. The lock
helpers in :mod:`.locks` are the exception: each runs and commits its own short transaction.
Every function takes ``now`` (POSIX seconds) for tests; ``None`` means the wall clock.
"""
