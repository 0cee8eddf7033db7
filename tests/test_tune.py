"""`unlearnbench tune`: search spaces, the validation stream, the study's storage, tuned runs."""

from __future__ import annotations

import inspect
import typing

import optuna
import pytest

from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Categorical, Float, Int, space

#: Arguments that span decades: their ranges must be sampled on a log scale.
LOG_SCALED = ("lr", "weight_decay")


def _accepts(annotation, distribution) -> bool:
    """The record's type fits the argument's annotation (float <- Float, int <- Int, bool/Literal <- Categorical)."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing))  # postponed annotations of `from __future__ import annotations`
    if isinstance(distribution, Categorical):
        if annotation is bool:
            return set(distribution.choices) <= {False, True}
        return typing.get_origin(annotation) is typing.Literal and set(distribution.choices) <= set(
            typing.get_args(annotation)
        )
    return annotation is (float if isinstance(distribution, Float) else int)


def check_search_space(method: str, cls) -> None:
    assert cls.search_space, f"method {method!r} declares no search_space (see unlearnbench/search_space.py)"
    parameters = inspect.signature(cls).parameters
    for name, distribution in cls.search_space.items():
        assert name in parameters, f"{method}: {name} is not an argument of the method"
        assert isinstance(distribution, Float | Int | Categorical)
        assert _accepts(parameters[name].annotation, distribution), (method, name, parameters[name].annotation)
        assert distribution.contains(parameters[name].default), f"{method}: default {name} outside its range"
        if name in LOG_SCALED:
            assert distribution.log, f"{method}: {name} spans decades and must be log-scaled"


@pytest.mark.parametrize("method", METHODS.names())
def test_every_method_declares_a_typed_search_space_around_its_defaults(method):
    check_search_space(method, METHODS.get(method))


@pytest.mark.parametrize("method", METHODS.names())
def test_every_point_of_a_search_space_builds_the_method(method):
    cls = METHODS.get(method)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        values = {name: d.suggest(trial, name) for name, d in cls.search_space.items()}
        built = cls(**values)
        for name, value in values.items():
            assert built.hparams[name] == value
            assert cls.search_space[name].contains(value)
        study.tell(trial, 0.0)


def test_a_method_without_a_space_fails_the_registry_test():
    class Bare(METHODS.get("finetune")):
        search_space = None

    with pytest.raises(AssertionError, match="declares no search_space"):
        check_search_space("bare", Bare)

    class Linear(METHODS.get("finetune")):
        search_space = space(GRADIENT_SPACE, lr=Float(1e-4, 1e-1))

    with pytest.raises(AssertionError, match="log-scaled"):
        check_search_space("linear", Linear)


def test_epoch_cap_lowers_only_the_upper_end():
    assert Int(1, 10).capped(6) == Int(1, 6)
    assert Int(3, 10).capped(2) == Int(2, 2)
    assert Int(1, 4).capped(6) == Int(1, 4)
