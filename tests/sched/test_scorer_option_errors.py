"""Scorer options the factory cannot take are a ConfigError naming them, not a bare
TypeError from ``factory(typical, **options)``."""

from __future__ import annotations

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.placement.frag import TypicalPods, typical_pods
from danlu.sched.placement.share import (
    BestFitScorer,
    ScorerRegistry,
    ShareRequest,
    ShareScorer,
    make_scorer,
)


def _typical() -> TypicalPods:
    return typical_pods([ShareRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000)])


@pytest.mark.parametrize("name", ["random", "best-fit", "fgd", "danlu"])
@pytest.mark.parametrize("options", [[("large_weight", 1.0)], "large_weight=1", 5])
def test_options_that_are_no_mapping_are_a_config_error(name: str, options: object) -> None:
    with pytest.raises(ConfigError, match=rf"{name} scorer: options must be a mapping") as err:
        make_scorer(name, typical=_typical(), options=options)  # type: ignore[arg-type]
    assert "or None for the defaults" in str(err.value)


@pytest.mark.parametrize("name", ["random", "best-fit", "fgd", "danlu"])
def test_an_option_name_that_is_no_string_is_a_config_error(name: str) -> None:
    options = {1: 2.0}
    with pytest.raises(ConfigError, match=rf"{name} scorer: the option name 1 .*must be a string"):
        make_scorer(name, typical=_typical(), options=options)  # type: ignore[arg-type]


def test_an_unknown_keyword_of_a_registered_factory_lists_the_accepted_ones() -> None:
    def weighted(
        typical: TypicalPods | None, *, alpha: float = 1.0, beta: float = 0.0
    ) -> ShareScorer:
        return BestFitScorer()

    def bare(typical: TypicalPods | None) -> ShareScorer:
        return BestFitScorer()

    registry = ScorerRegistry()
    registry.register("weighted", weighted)
    registry.register("bare", bare)
    with pytest.raises(
        ConfigError, match=r"weighted scorer: unknown option 'gamma'; valid: alpha, beta"
    ):
        registry.create("weighted", options={"gamma": 1.0})
    with pytest.raises(ConfigError, match=r"the bare scorer takes no options, got gamma"):
        make_scorer("bare", registry=registry, options={"gamma": 1.0})
    # the typical pods are no option, and the accepted keywords still reach the factory
    with pytest.raises(ConfigError, match=r"unknown option 'typical'"):
        registry.create("weighted", options={"typical": None})
    assert isinstance(registry.create("weighted", options={"beta": 2.0}), BestFitScorer)
    assert isinstance(registry.create("bare", options={}), BestFitScorer)


def test_a_factory_taking_any_keywords_checks_them_itself() -> None:
    seen: dict[str, object] = {}

    def anything(typical: TypicalPods | None, **options: object) -> ShareScorer:
        seen.update(options)
        return BestFitScorer()

    registry = ScorerRegistry()
    registry.register("anything", anything)
    registry.create("anything", options={"whatever": 3})
    assert seen == {"whatever": 3}


def test_builtin_unknown_options_keep_their_messages() -> None:
    with pytest.raises(
        ConfigError, match=r"danlu scorer: unknown option 'colour'; valid: fgd_weight"
    ):
        make_scorer("danlu", typical=_typical(), options={"colour": 1.0})
    with pytest.raises(ConfigError, match=r"the fgd scorer takes no options, got colour"):
        make_scorer("fgd", typical=_typical(), options={"colour": 1.0})
