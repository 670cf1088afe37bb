"""A ``file:`` URL ``checkpoint_dir`` is read as RFC 8089 says, the same way by the spec's
checks and by what the control plane asks of it (:func:`file_url_path`): its path
percent-decoded (``file:///tmp/my%20runs`` was the folder ``my%20runs``), ``localhost`` or
no host naming this machine and any other host refused, ``file:/path`` (one slash) read as
``file:///path``; a plain path is never decoded."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.file_url import FileUrlError, local_file_path
from danlu.core.spec import file_url_path, is_checkpoint_location, parse_spec


def _spec(location: str, *, stored: bool = False) -> str | None:
    data = {"name": "a", "command": ["x"], "checkpoint_dir": location}
    return parse_spec(data, stored=stored).checkpoint_dir


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ("file:///tmp/my%20runs", "/tmp/my runs"),
        ("FILE:///tmp/100%25", "/tmp/100%"),
        ("file:///tmp/caf%C3%A9", "/tmp/café"),
        ("file:///tmp/café", "/tmp/café"),
        ("file:///tmp/a%2fb", "/tmp/a/b"),
        ("file:///tmp/50%", "/tmp/50%"),  # no two hex digits: as written
        ("file:///tmp/%zz", "/tmp/%zz"),
        ("file://localhost/tmp/my%20runs", "/tmp/my runs"),
        ("file://LocalHost/shared/ckpt", "/shared/ckpt"),
        ("file:/shared/my%20ckpt", "/shared/my ckpt"),
        ("File:/shared/ckpt", "/shared/ckpt"),
    ],
)
def test_a_file_url_names_its_decoded_path(location: str, path: str) -> None:
    assert local_file_path(location) == path
    assert file_url_path(location) == path


@pytest.mark.parametrize("location", ["/tmp/my%20runs", "s3://bucket/my%20runs", "/x/file:/y"])
def test_what_is_no_file_url_is_never_decoded(location: str) -> None:
    assert local_file_path(location) is None
    assert file_url_path(location) is None
    assert _spec(location) == location


@pytest.mark.parametrize(
    ("location", "said"),
    [
        ("file://server/shared/ckpt", "names the host 'server'"),
        ("file://ckpt/run1", "names the host 'ckpt'"),
        ("file://~/ckpt", "names the host '~'"),
        ("file://localhost:80/x", "names the host 'localhost:80'"),
        ("file:ckpt", "relative path 'ckpt'"),
        ("file://", "no path"),
        ("file://localhost", "no path"),
        ("file:///tmp/a%00b", "NUL"),
        ("file:///tmp/a%ffb", "no UTF-8"),
        ("file:///tmp/%C3", "no UTF-8"),
    ],
)
def test_a_file_url_naming_no_directory_here_is_refused_naming_the_field(
    location: str, said: str
) -> None:
    with pytest.raises(FileUrlError, match=said):
        local_file_path(location)
    assert file_url_path(location) == ""  # no absolute path: launched with one of the job's
    with pytest.raises(SpecError) as caught:
        _spec(location)
    assert caught.value.field == "checkpoint_dir"
    assert said in caught.value.message
    assert "file:///shared/ckpt/run1" in caught.value.message


def test_the_refusal_of_bad_utf8_says_how_to_write_a_percent() -> None:
    with pytest.raises(SpecError) as caught:
        _spec("file:///tmp/100%ff")
    assert "%ff" in caught.value.message and "%25" in caught.value.message


@pytest.mark.parametrize("location", ["file:///tmp/a%00b", "file://server/x", "file:ckpt"])
def test_a_stored_spec_naming_one_is_still_read_as_written(location: str) -> None:
    assert _spec(location, stored=True) == location


@pytest.mark.parametrize(
    ("written", "held"),
    [
        ("FILE:///tmp/my%20runs", "file:///tmp/my%20runs"),  # not decoded twice later
        ("file:///tmp/100%2541", "file:///tmp/100%2541"),
        ("FILE://localhost/x", "file://localhost/x"),
        ("FILE:/shared/ckpt", "file:/shared/ckpt"),
    ],
)
def test_the_spec_holds_the_url_undecoded_its_scheme_in_lower_case(written: str, held: str) -> None:
    assert _spec(written) == held
    assert local_file_path(held) == local_file_path(written)


def test_a_literal_percent_escape_decodes_once() -> None:
    assert local_file_path(_spec("file:///tmp/100%2541") or "") == "/tmp/100%41"


@pytest.mark.parametrize("location", ["file:/shared/ckpt", "FILE:/x", "file:///x", "/x"])
def test_a_file_url_with_one_slash_is_a_checkpoint_location(location: str) -> None:
    assert is_checkpoint_location(location)


@pytest.mark.parametrize("location", ["file:ckpt", "ckpt", "~/ckpt"])
def test_a_relative_location_is_none(location: str) -> None:
    assert not is_checkpoint_location(location)
