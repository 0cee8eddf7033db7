"""`RunConfig`: one (method, stream, seed) run, validated before anything is written."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from unlearnbench.registry import ARCHS, DATASETS, GUARDS, METHODS, STREAMS, UnknownNameError
from unlearnbench.training import Recipe


class ConfigError(ValueError):
    """Invalid user input; the CLI prints it as one line and exits 2."""


@dataclass
class Hardware:
    """Passed through to Lightning's Trainer unchanged."""

    accelerator: str = "auto"
    devices: int | str = 1
    strategy: str = "auto"
    num_nodes: int = 1
    precision: str = "32-true"


@dataclass
class RunConfig:
    method: str
    stream: str = "classwise"
    dataset: str = "digits"
    #: where on-disk datasets live (default $UNLEARNBENCH_DATA or ./data); `download` fetches them there
    data_dir: Path | None = None
    download: bool = False
    arch: str = "smallcnn"
    requests: int = 5
    size: float | None = None
    seed: int = 0
    oracle: Literal["retrain", "none"] = "retrain"
    #: non-members the SVC attack is fit on (evaluation/mia.py): salun (test of retained classes) or loft (all test)
    mia_protocol: Literal["salun", "loft"] = "salun"
    method_args: dict = field(default_factory=dict)
    #: plasticity guards (unlearnbench.guards), applied in this order; their arguments by guard name
    guards: list[str] = field(default_factory=list)
    guard_args: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)
    out: Path = Path("runs")
    store: Path | None = None
    run_dir: Path | None = None
    save_logits: bool = False
    hardware: Hardware = field(default_factory=Hardware)
    #: experiment logger (unlearnbench.loggers): csv (default), wandb (offline unless set up) or none
    logger: str = "csv"

    def validate(self) -> None:
        """Names, method arguments and output location; the stream itself is checked when built."""
        for registry, name in (
            (METHODS, self.method),
            (STREAMS, self.stream),
            (DATASETS, self.dataset),
            (ARCHS, self.arch),
        ):
            try:
                registry.get(name)  # plain names, and open families such as timm:<model>
            except UnknownNameError as error:
                raise ConfigError(str(error)) from None
        if self.oracle not in ("retrain", "none"):
            raise ConfigError(f"unknown oracle {self.oracle!r}; choose one of: retrain, none")
        if self.mia_protocol not in ("salun", "loft"):
            raise ConfigError(f"unknown mia_protocol {self.mia_protocol!r}; choose one of: salun, loft")
        if self.logger not in ("csv", "wandb", "none"):
            raise ConfigError(f"unknown logger {self.logger!r}; choose one of: csv, wandb, none")
        unknown_recipe = sorted(set(self.recipe) - {f.name for f in fields(Recipe)})
        if unknown_recipe:
            raise ConfigError(
                f"unknown recipe key(s) {', '.join(unknown_recipe)}; valid: {', '.join(f.name for f in fields(Recipe))}"
            )
        accepted = inspect.signature(METHODS.get(self.method)).parameters
        unknown = sorted(set(self.method_args) - set(accepted))
        if unknown:
            raise ConfigError(
                f"method {self.method!r} has no argument(s) {', '.join(unknown)}; its arguments are: "
                f"{', '.join(accepted)}"
            )
        self._validate_guards()
        for path in (self.out, self.store, self.run_dir):
            if path is not None:
                _check_writable_directory(path)

    @property
    def store_dir(self) -> Path:
        return self.store if self.store is not None else self.out / "store"

    def identity(self, method_hparams: dict, recipe: dict, size: float) -> dict:
        """Everything the numbers depend on: saved as config.yaml and hashed into the run's name.

        Normalized through JSON so that it compares equal to its own YAML round trip.
        """
        identity = {
            "method": self.method,
            "method_args": method_hparams,
            "stream": self.stream,
            "size": size,
            "requests": self.requests,
            "dataset": self.dataset,
            "arch": self.arch,
            "seed": self.seed,
            "oracle": self.oracle,
            "mia_protocol": self.mia_protocol,
            "recipe": recipe,
            "precision": self.hardware.precision,
        }
        if self.guards:  # only when used, so unguarded runs keep their names; a list, since order matters
            identity["guards"] = [{name: self.resolved_guard_args(name)} for name in self.guards]
        return json.loads(json.dumps(identity, default=str))

    def run_path(self, identity: dict) -> Path:
        """`--run-dir` if given, else OUT/<method>-<stream>-...-<hash of the identity>."""
        if self.run_dir is not None:
            return self.run_dir
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
        name = f"{'+'.join([self.method, *self.guards])}-{self.stream}-{self.dataset}-{self.arch}-T{self.requests}-seed{self.seed}-{digest}"
        return self.out / name

    def _validate_guards(self) -> None:
        for name in self.guards:
            if name not in GUARDS:
                raise ConfigError(f"unknown guard {name!r}; choose one of: {', '.join(GUARDS.names())}")
        if len(set(self.guards)) != len(self.guards):
            raise ConfigError(f"guard listed twice: {', '.join(self.guards)}")
        if self.guards and not METHODS.get(self.method).trains_by_gradient:
            raise ConfigError(
                f"guard(s) {', '.join(self.guards)} act on training by gradient steps, which method "
                f"{self.method!r} does not do; run it without --guard"
            )
        for name, args in self.guard_args.items():
            if name not in self.guards:
                raise ConfigError(f"arguments given for guard {name!r}, which is not selected; add --guard {name}")
            accepted = inspect.signature(GUARDS.get(name)).parameters
            unknown = sorted(set(args) - set(accepted))
            if unknown:
                raise ConfigError(
                    f"guard {name!r} has no argument(s) {', '.join(unknown)}; its arguments are: {', '.join(accepted)}"
                )

    def resolved_guard_args(self, name: str) -> dict:
        """A guard's arguments with its defaults filled in (the run identity records all of them)."""
        defaults = {k: p.default for k, p in inspect.signature(GUARDS.get(name)).parameters.items()}
        return defaults | self.guard_args.get(name, {})

    def as_dict(self) -> dict:
        data = asdict(self)
        data["out"], data["store"] = str(self.out), str(self.store_dir)
        return data


def _check_writable_directory(path: Path) -> None:
    """`path` is, or can be created as, a directory we may write into."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{existing} exists and is not a directory; choose another location than {path}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{existing} is not writable; choose another location than {path}")
