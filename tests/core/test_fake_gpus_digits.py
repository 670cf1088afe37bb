"""``--fake-gpus`` read digits of other scripts as numbers: ``\\d`` matched them and ``int()``
read them, so ``٣x80GiB`` (an Arabic-Indic three) built three GPUs and ``1２x80GiB`` (a
full-width two) twelve. They are refused now, naming the option, the character and the fix;
ASCII counts and sizes read as before."""

from __future__ import annotations

import pytest

from danlu.core.errors import ConfigError
from danlu.core.fake_gpus import FakeGroup, parse_fake_gpus

ODD = [
    ("٣x80GiB", "٣", "U+0663"),  # the count, Arabic-Indic
    ("1２x80GiB", "２", "U+FF12"),  # a full-width digit in the count
    ("²xH100", "²", "U+00B2"),  # a superscript count
    ("3x٨٠GiB", "٨", "U+0668"),  # the size
    ("2xH100,٤xH100", "٤", "U+0664"),  # in a later group
]


@pytest.mark.parametrize(("spec", "char", "code"), ODD, ids=[c for _, _, c in ODD])
def test_a_digit_that_is_not_ascii_is_refused_naming_the_option(
    spec: str, char: str, code: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_fake_gpus(spec)
    message = str(caught.value)
    assert message.startswith(f"--fake-gpus {spec!r}: "), message
    assert f"has {char!r} ({code}), which is not an ASCII digit; use the digits 0-9" in message


def test_ascii_counts_and_sizes_still_read() -> None:
    groups = parse_fake_gpus("3x80GiB,2xH100")
    assert [g.count for g in groups] == [3, 2]
    assert all(isinstance(g, FakeGroup) for g in groups)
    assert groups[0].gpu_type.memory == 80 * 1024**3
