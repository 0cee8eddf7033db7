"""Tuned hyperparameter files: what `unlearnbench tune` writes and `run --hparams DIR` reads.

One YAML per (dataset, arch, stream kind, method), `DIR/<dataset>-<arch>-<stream>-<method>.yaml`:

```yaml
dataset: digits
arch: smallcnn
stream: classwise
method: salun
hparams: {optim: {lr: 0.031, epochs: 4, weight_decay: 0.0002}, exclude_true: false, ratio: 0.41}
provenance: {study: ..., storage: ..., sampler: tpe, objective: mean_gap, trials: 8, complete: 7,
             pruned: 1, best_value: 1.93, budget: {...}, tune_seeds: [100, 101], version: ...}
```

Hyperparameters are named as the method's arguments, a gradient method's SGD settings in its `optim`
group, as on the command line (`--salun.optim.lr`); a file written before the settings were a group
(`lr:` beside `ratio:`) is read as its nested twin (`records.legacy_method_args`). Reading a file
needs neither Optuna nor the study: a run depends on the file
alone. A tuned run's identity carries `marker(provenance)`, so its run directory, its hash and
its leaderboard row differ from the same method's default run.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from unlearnbench.errors import ConfigError
from unlearnbench.io import load_yaml
from unlearnbench.records import legacy_method_args

#: The provenance keys copied into a tuned run's identity (its `tuned:` entry).
MARKER_KEYS = ("study", "objective", "sampler", "trials", "best_value", "tune_seeds")


def hparams_path(folder: Path, dataset: str, arch: str, stream: str, method: str) -> Path:
    # `timm:<model>` archs: the colon is not a portable file-name character
    return Path(folder) / f"{dataset}-{arch.replace(':', '_')}-{stream}-{method}.yaml"


def load_tuned(folder: Path, dataset: str, arch: str, stream: str, method: str) -> dict:
    """The file's mapping (`hparams`, `provenance`, ...); ConfigError naming the fix when it is missing or malformed."""
    path = hparams_path(folder, dataset, arch, stream, method)
    if not Path(folder).is_dir():
        raise ConfigError(f"--hparams {folder} is not a directory of tuned hyperparameters")
    if not path.is_file():
        raise ConfigError(
            f"no tuned hyperparameters for {method} on {dataset}/{arch}/{stream} in {folder} (expected {path.name}); "
            f"run: unlearnbench tune --method {method} --dataset {dataset} --arch {arch} --stream {stream} --out {folder}"
        )
    try:
        data = load_yaml(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read {path}: {error}".replace("\n", " ")) from error
    if not (
        isinstance(data, dict) and isinstance(data.get("hparams"), dict) and isinstance(data.get("provenance"), dict)
    ):
        raise ConfigError(f"{path} is not a tuned hyperparameter file (needs `hparams:` and `provenance:` mappings)")
    from unlearnbench.methods.base import group_settings
    from unlearnbench.registry import METHODS

    return {**data, "hparams": legacy_method_args(data["hparams"], group_settings(METHODS.get(method)))}


def marker(provenance: dict) -> dict:
    """What a tuned run's identity records of where its hyperparameters came from."""
    return {key: provenance.get(key) for key in MARKER_KEYS}
