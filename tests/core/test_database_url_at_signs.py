"""A PostgreSQL URL whose password holds an ``@`` that is not percent-encoded parsed: the
password ended at its first ``@`` and the rest of it became the host or the database, so the
server failed later with "failed to resolve host" and logged that rest of the password. Such
a URL is refused with the message about percent-encoding, which never shows the URL."""

from __future__ import annotations

import pytest

from danlu.core.setting_values import check_database_url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://danlu:p@ss/w#rd@127.0.0.1:5432/danlu",  # the rest of it the database
        "postgresql://danlu:p@ssw#rd@127.0.0.1:5432/danlu",  # the rest of it the host
        "postgres://danlu:p@ssw#rd@dbhost/danlu?sslmode=require",
    ],
)
def test_an_unencoded_at_in_the_password_is_refused_unseen(url: str) -> None:
    with pytest.raises(ValueError) as err:
        check_database_url(url)
    text = str(err.value)
    assert "%40" in text and "--database-url" in text
    assert "w#rd" not in text and "127.0.0.1" not in text and "dbhost" not in text


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://danlu:p%40ss%2Fw%23rd@127.0.0.1:5432/danlu",
        "postgresql://danlu@tenant:pw@dbhost/danlu",  # a user name with '@', as some hosts use
        "postgresql://danlu:pw@dbhost/dan%40lu",
        "postgresql://danlu@dbhost/danlu?options=-c%20a@b",
        "sqlite:////var/lib/danlu/a@b.db",
    ],
)
def test_urls_with_an_at_where_it_belongs_still_pass(url: str) -> None:
    assert check_database_url(url)
