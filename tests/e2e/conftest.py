"""The ``server`` / ``shared_server`` fixtures (a real ``danlu up`` subprocess) come from
:mod:`e2e_server`."""

from e2e_server import server, shared_server

__all__ = ["server", "shared_server"]
