"""`unlearnbench tune`'s options: its parser and the words its options take.

Apart from `tune.py`, which imports Optuna, torch and Lightning, so that `cmd_tune` parses the command line before
any of them is imported: a misspelt option (`--trial 3`) or a value of the wrong type is refused in well under 2 s.
"""

from __future__ import annotations

from pathlib import Path

from jsonargparse import ArgumentParser

from unlearnbench.errors import ConfigError, excerpt
from unlearnbench.registry import METHODS

OBJECTIVES = ("mean_gap", "final_gap")
SAMPLERS = ("tpe", "nsga2")
PRUNERS = ("median", "none")
#: Seeds of the reported runs (`run`'s default and the suites'): tuning streams must use others.
EVALUATION_SEEDS = (0, 1, 2)
DEFAULT_TUNE_SEEDS = (100, 101)


def tune_seeds(text: str) -> tuple[int, ...]:
    """`--tune-seeds 100,101` as the seeds it names."""
    try:
        return tuple(int(part) for part in str(text).strip("[]() ").split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--tune-seeds takes comma-separated integers (e.g. 100,101), got {excerpt(text)}") from None


def check_study_settings(
    objective: str, sampler: str, pruner: str, trials: int, heartbeat: int, seeds: tuple[int, ...]
) -> None:
    """A study's own settings, which need nothing imported: checked by `cmd_tune` on the command line before torch
    is, and by `TuneSpec.validate` on every study (a tune suite's too)."""
    for name, value, choices in (
        ("objective", objective, OBJECTIVES),
        ("sampler", sampler, SAMPLERS),
        ("pruner", pruner, PRUNERS),
    ):
        if value not in choices:
            raise ConfigError(f"unknown {name} {excerpt(value)}; choose one of: {', '.join(choices)}")
    if trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {trials}")
    if heartbeat < 1:
        raise ConfigError(f"--heartbeat must be at least 1 second, got {heartbeat}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--tune-seeds must be distinct seeds, got {list(seeds)}")
    overlap = sorted(set(seeds) & set(EVALUATION_SEEDS))
    if overlap:
        raise ConfigError(
            f"tuning seed(s) {overlap} are evaluation seeds {list(EVALUATION_SEEDS)}: tuning on the streams "
            f"that are reported would leak; choose others (default {list(DEFAULT_TUNE_SEEDS)})"
        )


def tune_parser() -> ArgumentParser:
    """`unlearnbench tune`'s options: one study's settings (or a tune suite file), its budget and its storage."""
    from unlearnbench.config import declared_options
    from unlearnbench.parsers import add_field_options, command_parser  # at each call: the docs' test replaces it

    parser = command_parser("tune", "Tune a method's hyperparameters on validation streams.")
    parser.add_argument("--suite", type=Path | None, default=None, help="tune suite YAML (every method, equal budget)")
    parser.add_argument("--method", type=str | None, default=None, help=f"one of: {', '.join(METHODS.catalog())}")
    # the run every trial's runs share, spelt as `run` spells it
    shared = ("stream", "dataset", "data_dir", "arch", "requests", "size", "recipe", "store")
    add_field_options(parser, declared_options(shared))
    parser.add_argument(
        "--dataset_args", type=dict, default={}, help='e.g. {"train_size": 1000} (as `run --dataset.*`)'
    )
    parser.add_argument("--arch_args", type=dict, default={}, help='e.g. {"width": 32, "pools": 2} (as `run --arch.*`)')
    parser.add_argument("--trials", type=int, default=30, help="trials per method (the same for every method)")
    parser.add_argument(
        "--tune_seeds", "--tune-seeds", type=str, default="100,101", help="stream seeds tuned on (never 0, 1, 2)"
    )
    parser.add_argument("--objective", type=str, default="mean_gap", help=f"one of: {', '.join(OBJECTIVES)}")
    parser.add_argument("--sampler", type=str, default="tpe", help="tpe (default) or nsga2 (two objectives)")
    parser.add_argument("--pruner", type=str, default="median", help="median (default) or none")
    parser.add_argument("--out", type=Path | None, default=None, help="tune directory (default tuned/)")
    parser.add_argument("--storage", type=str | None, default=None, help="RDB URL (default sqlite:///OUT/studies.db)")
    parser.add_argument("--heartbeat", type=int, default=60, help="seconds between a trial's heartbeats")
    parser.add_argument("--sampler_seed", "--sampler-seed", type=int | None, default=None)
    add_field_options(parser, declared_options(("accelerator", "devices", "precision")))
    parser.add_argument(
        "--quiet", type=bool, nargs="?", const=True, default=False, help="only errors and warnings (stderr)"
    )
    return parser
