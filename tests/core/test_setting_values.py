"""The grammars of the settings' values live in :mod:`danlu.core.setting_values`, read
without the environment; :mod:`danlu.config`, which reads the variables, re-exports them, so
every import of them from there keeps working and names the same objects."""

from __future__ import annotations

import pytest

import danlu.config as config
import danlu.core.setting_values as setting_values
from danlu.core.errors import ConfigError

MOVED = [
    "check_database_url",
    "check_fake_gpus",
    "normalise_database_url",
    "parse_option_pairs",
    "parse_policy_options",
    "split_sbatch_options",
    "sqlite_url",
]


@pytest.mark.parametrize("name", MOVED)
def test_the_config_module_re_exports_the_value_grammars(name: str) -> None:
    assert getattr(config, name) is getattr(setting_values, name)


def test_the_settings_still_check_their_values_with_them() -> None:
    with pytest.raises(ConfigError, match="DANLU_POLICY_OPTIONS"):
        config.load_settings(policy_options="[1]")
    with pytest.raises(ConfigError, match="DANLU_SLURM_SBATCH_OPTIONS"):
        config.load_settings(executor="slurm", slurm_sbatch_options="account=ml")
    settings = config.load_settings(policy_options='{"min-hold": [1, 2]}')
    assert settings.policy_knobs == {"min_hold": (1, 2)}


def test_the_grammars_read_what_they_read_before() -> None:
    assert config.split_sbatch_options("--account=ml '--comment=a b'") == (
        "--account=ml",
        "--comment=a b",
    )
    assert config.normalise_database_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert config.parse_option_pairs(["a-b=2", "c=x"], "--option") == {"a_b": 2, "c": "x"}
    assert [group.count for group in config.check_fake_gpus("4x80GiB,2xH100")] == [4, 2]
    with pytest.raises(ConfigError, match=r"^DANLU_FAKE_GPUS: "):
        config.check_fake_gpus("0x80GiB")
