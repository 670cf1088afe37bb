"""An ``admin.token`` that holds no text (bytes that are not UTF-8: a damaged or overwritten
file) is a stale one: the next start issues a new admin token, writes it over the file and
revokes the earlier bootstrap token, as for a missing file. It stopped the start with a
bare ``UnicodeDecodeError``."""

from __future__ import annotations

import stat
from pathlib import Path

from danlu.server.db import Database
from danlu.server.services import users

NOW = 1_000_000.0


def test_an_admin_token_file_of_bytes_that_are_no_text_is_replaced(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "home" / "admin.token"
    with db.session() as s:
        old = users.bootstrap_admin(s, path, now=NOW)
    assert old is not None
    path.write_bytes(b"\xff\xfe\x00dl_\x80garbage\n")
    with db.session() as s:
        new = users.bootstrap_admin(s, path, now=NOW + 1)
    assert new is not None and new != old
    assert path.read_text(encoding="utf-8").strip() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with db.read_session() as s:
        assert users.find_token(s, old) is None  # the earlier bootstrap token: revoked
        admin = users.authenticate(s, new)
        assert admin is not None and admin.is_admin
    with db.session() as s:  # the file holds a valid token now: nothing changes
        assert users.bootstrap_admin(s, path, now=NOW + 2) is None
