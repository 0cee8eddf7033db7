"""`RunConfig`: one (method, stream, seed) run, validated before anything is written."""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from unlearnbench.registry import ARCHS, DATASETS, METHODS, STREAMS
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
    arch: str = "smallcnn"
    requests: int = 5
    size: float | None = None
    seed: int = 0
    oracle: Literal["retrain", "none"] = "retrain"
    method_args: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)
    out: Path = Path("runs")
    store: Path | None = None
    save_logits: bool = False
    hardware: Hardware = field(default_factory=Hardware)

    def validate(self) -> None:
        """Names, method arguments and output location; the stream itself is checked when built."""
        for registry, name in (
            (METHODS, self.method),
            (STREAMS, self.stream),
            (DATASETS, self.dataset),
            (ARCHS, self.arch),
        ):
            if name not in registry:
                raise ConfigError(f"unknown {registry.kind} {name!r}; choose one of: {', '.join(registry.names())}")
        if self.oracle not in ("retrain", "none"):
            raise ConfigError(f"unknown oracle {self.oracle!r}; choose one of: retrain, none")
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
        for path in (self.out, self.store):
            if path is not None and path.exists() and not path.is_dir():
                raise ConfigError(f"{path} exists and is not a directory; pass another --out/--store")

    @property
    def store_dir(self) -> Path:
        return self.store if self.store is not None else self.out / "store"

    def identity(self, method_hparams: dict, recipe: dict, size: float) -> dict:
        """Everything the numbers depend on: saved as config.yaml and hashed into the run's name."""
        return {
            "method": self.method,
            "method_args": method_hparams,
            "stream": self.stream,
            "size": size,
            "requests": self.requests,
            "dataset": self.dataset,
            "arch": self.arch,
            "seed": self.seed,
            "oracle": self.oracle,
            "recipe": recipe,
            "precision": self.hardware.precision,
        }

    def run_name(self, identity: dict) -> str:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
        return f"{self.method}-{self.stream}-{self.dataset}-{self.arch}-T{self.requests}-seed{self.seed}-{digest}"

    def as_dict(self) -> dict:
        data = asdict(self)
        data["out"], data["store"] = str(self.out), str(self.store_dir)
        return data
