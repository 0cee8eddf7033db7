"""`RunConfig`: one (method, stream, seed) run, validated before anything is written."""

from __future__ import annotations

import functools
import inspect
import json
import typing
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from unlearnbench.early_checks import (
    CHOICES,
    QUANTIZATION_BITS,
    SEED_PARTS,
    check_folder_part,
    check_hardware_choices,
    check_numbers,
    check_recipe,
    check_run_choices,
    check_run_numbers,
    check_stream_size,
    is_int,
)
from unlearnbench.errors import ConfigError, DamagedFileError
from unlearnbench.hparams import marker
from unlearnbench.io import check_writable_directory
from unlearnbench.ranges import check_ranges, groups, parameters, paths, valid_ranges
from unlearnbench.records import RunIdentity
from unlearnbench.registry import ARCHS, DATASETS, GUARDS, LOGGERS, METHODS, STREAMS, UnknownNameError

__all__ = ["ConfigError", "DamagedFileError", "Hardware", "RunConfig", "check_numbers"]


def option(default: object, help: str, registry: str | None = None):
    """A field that is a command-line option: its default, its `--help` line and, for a name chosen from a registry,
    that registry's name in `unlearnbench.registry` (the help then lists its entries). A mutable default is copied
    for each instance."""
    metadata = {"help": help, "registry": registry}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Hardware:
    """Passed through to Lightning's Trainer unchanged."""

    accelerator: str = option("auto", "Lightning's accelerator: auto (default), cpu, gpu, ...")
    devices: int | str = option(1, "devices per node: a count, -1 (all), auto, or ids such as 0,1")
    strategy: str = option("auto", "Lightning's strategy: auto (default), ddp, ...")
    num_nodes: int = option(1, "nodes (machines) of a multi-node run")
    # a number (`16`) as Lightning takes it, from a YAML file or a suite
    precision: int | str = option(
        "32-true", "Lightning's precision: 32-true (default), 16-mixed, bf16-mixed, 64, 16, ..."
    )

    @staticmethod
    def choices() -> dict[str, list[str]]:
        """The words `accelerator`, `strategy` and `precision` may be, as the installed Lightning lists them (recorded
        in `known_arguments.json`, with its version, for the checks made before Lightning is imported)."""
        from lightning.fabric.connector import _PRECISION_INPUT
        from lightning.pytorch.accelerators import AcceleratorRegistry
        from lightning.pytorch.strategies import StrategyRegistry

        precisions = (str(p) for literal in typing.get_args(_PRECISION_INPUT) for p in typing.get_args(literal))
        return {
            "accelerator": ["auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())],
            "strategy": ["auto", *StrategyRegistry.available_strategies()],
            "precision": list(dict.fromkeys(precisions)),
        }

    def unified_precision(self) -> str:
        """The precision in Lightning's own spelling (`16`, `"16"` and `16-mixed` are one precision: one run's name)."""
        from lightning.fabric.connector import _convert_precision_to_unified_args

        with warnings.catch_warnings():  # Lightning's advice to spell an alias out is for the Trainer, which gives it
            warnings.simplefilter("ignore")
            return _convert_precision_to_unified_args(self.precision)

    def validate(self) -> None:
        """Names and counts Lightning would reject only when the first Trainer is built (after pretraining data
        is loaded, or after hours of a suite); whether the machine has such a device is still Lightning's call."""
        check_hardware_choices(asdict(self), self.choices())
        if not _valid_devices(self.devices):
            raise ConfigError(
                f"devices must be a count >= 1, -1 (all), auto, or a list of device ids such as 0,1; got {self.devices!r}"
            )
        if not is_int(self.num_nodes) or self.num_nodes < 1:
            raise ConfigError(f"num_nodes must be a whole number >= 1, got {self.num_nodes!r}")

    def check_available(self) -> None:
        """Refuses an accelerator this machine does not have, or more GPUs than it has: Lightning would raise only
        when the first Trainer is built, after the data is loaded, with a traceback. Not part of `validate`, which
        `suite --check` runs: a GPU suite is checked on a login node that has none."""
        from lightning.pytorch.accelerators import AcceleratorRegistry, CUDAAccelerator, MPSAccelerator

        if self.accelerator == "auto":
            return
        if self.accelerator == "gpu":
            available = CUDAAccelerator.is_available() or MPSAccelerator.is_available()
        else:
            available = AcceleratorRegistry[self.accelerator]["accelerator"].is_available()
        if not available:
            raise ConfigError(
                f"accelerator {self.accelerator!r} is not available on this machine (no such device is visible); "
                "use --accelerator cpu, or auto to take what there is"
            )
        if self.accelerator in ("gpu", "cuda") and CUDAAccelerator.is_available() and is_int(self.devices):
            visible = CUDAAccelerator.auto_device_count()
            if int(self.devices) > visible:
                raise ConfigError(f"devices {self.devices} asks for more GPUs than the {visible} visible here")


@dataclass(frozen=True)
class RunConfig:
    """One run, frozen once built: every option of `unlearnbench run`, each declared once here with its type, default
    and help.

    `cli.run_parser` builds `run`'s options from these fields (an `option`'s help, a `--name` and a `--name-with-dashes`
    spelling each), `tune_options.tune_parser` the run options a study shares, and a suite file's `common` and
    settings take them by name (`grid.COMMON_KEYS`): a new run option is one field here.
    """

    method: str
    stream: str = option("classwise", "the request stream", registry="STREAMS")
    dataset: str = option("digits", "the dataset", registry="DATASETS")
    data_dir: Path | None = option(None, "folder of on-disk datasets (default $UNLEARNBENCH_DATA or ./data)")
    download: bool = option(False, "fetch a missing dataset into --data-dir")
    #: dataset arguments (`--dataset.train_size N`): the factory's keywords plus train_size/test_size subsets
    dataset_args: dict = field(default_factory=dict)
    arch: str = option("smallcnn", "the model", registry="ARCHS")
    #: arch arguments (`--arch.width 16`): the arch factory's keywords the dataset does not fix
    arch_args: dict = field(default_factory=dict)
    requests: int = option(5, "number of unlearning requests T")
    size: float | None = option(
        None,
        "classes per request (classwise, default 1) or fraction of the train set per request (random, default 0.01)",
    )
    seed: int = option(
        0,
        "the seed of everything the parts below leave unset: pretraining and oracles, the method's randomness, the "
        "stream, the attacks' subsampling",
    )
    # the seed parts (SUPREME, arXiv 2510.26714: one seed for all hides the variance of each)
    train_seed: int | None = option(None, "pretraining and oracles, and the model store's key (default --seed)")
    unlearn_seed: int | None = option(None, "the method's randomness and batch order (default --seed)")
    stream_seed: int | None = option(None, "the stream's manifest (default --seed)")
    oracle: Literal["retrain", "none"] = option("retrain", "retrain (default) or none: no gap")
    oracle_every: int = option(
        1,
        "oracles (gap, oracle attack) at t = K, 2K, ... and T only (default 1: every request): a T = 100 stream need "
        "not retrain 100 models",
    )
    single_shot_every: int | None = option(
        None,
        "serve F_t single-shot from the pretrained model at t = K, 2K, ... and T, for the forward-failure gain "
        "(default: where an oracle is, only T without oracles; 0: never)",
    )
    single_shot_baseline: Literal["single_task", "cumulative", "both"] = option(
        "single_task",
        "the single-shot counterfactual's retain set: single_task (default: train minus F_t alone, the paper's "
        "single-task baseline), cumulative (train minus F_1..F_t: forward_gain_cumulative) or both",
    )
    oracle_seeds: int = option(
        1, "K oracles per request, train seeds train_seed..train_seed+K-1 (RMIA references; ε score)"
    )
    relearn_every: int = option(
        0,
        "the relearning attack (evaluation/relearn.py) at t = K, 2K, ... and T: fine-tune copies of the method's "
        "model and the oracle on part of F_1..F_t, count the steps until the rest is back (default 0: never)",
    )
    relearn_steps: int = option(100, "the relearning attack's optimizer steps K, the curve's length − 1 (default 100)")
    relearn_fraction: float = option(
        0.5, "the share of F_1..F_t the attacker holds, in (0, 1); the rest is measured (default 0.5)"
    )
    relearn_margin: float = option(
        0.05, "relearned = within this share of the original's accuracy on the held-out part (default 0.05)"
    )
    quantize_every: int = option(
        0,
        "forget/retain/test accuracy with the weights quantized (evaluation/quantization.py), at t = K, 2K, ... and "
        "T (default 0: never)",
    )
    quantize_bits: list[int] = option(
        list(QUANTIZATION_BITS), "the bit widths quantized to, among 8 and 4 (default [8, 4])"
    )
    mia_protocol: Literal["salun", "loft"] = option(
        "salun",
        "non-members the SVC attack (evaluation/mia.py) is fit on: salun (test of retained classes, default) or loft "
        "(all test)",
    )
    method_args: dict = field(default_factory=dict)
    #: plasticity guards (unlearnbench.guards), applied in this order; their arguments by guard name
    guards: list[str] = field(default_factory=list)
    guard_args: dict = field(default_factory=dict)
    recipe: dict = option({}, "overrides of the pretraining/oracle recipe")
    out: Path = option(Path("runs"), "folder of run directories")
    store: Path | None = option(None, "model store (default OUT/store)")
    run_dir: Path | None = option(None, "exact run directory (default: named by config)")
    save_logits: bool = option(False, "save every model's logits beside its scores")
    hardware: Hardware = field(default_factory=Hardware)
    logger: str = option(
        "csv", "experiment logger (csv, the default, writes into the run directory)", registry="LOGGERS"
    )
    hparams: Path | None = option(
        None, "folder of `unlearnbench tune` files: the method starts from its tuned values (explicit ones win)"
    )
    #: "test": the dataset as it is; "validation": tuning's view, the test split replaced by a held-out
    #: part of train (unlearnbench.data.validation). Validation runs never enter a leaderboard.
    split: Literal["test", "validation"] = "test"

    def validate(self) -> None:
        """Names, method arguments and output location; the stream itself is checked when built."""
        from unlearnbench.data.cache import check_dataset_args
        from unlearnbench.methods.base import check_method_arguments, refuse_unread_settings
        from unlearnbench.training import check_arch_args

        for registry, name in (
            (METHODS, self.method),
            (STREAMS, self.stream),
            (DATASETS, self.dataset),
            (ARCHS, self.arch),
        ):
            check_folder_part(registry.kind, name)
            try:
                registry.get(name)  # plain names, and open families such as timm:<model>
            except UnknownNameError as error:
                raise ConfigError(str(error)) from None
        try:
            check_dataset_args(self.dataset, self.dataset_args)
            check_arch_args(self.arch, self.arch_args)
        except ValueError as error:  # DatasetError or the arch check's: bad arguments, found before loading
            raise ConfigError(str(error)) from None
        check_run_choices({name: getattr(self, name) for name in CHOICES})
        if self.logger not in LOGGERS:
            raise ConfigError(f"unknown logger {self.logger!r}; choose one of: {', '.join(LOGGERS.names())}")
        LOGGERS.get(self.logger).check_environment()
        check_recipe(self.recipe)
        served = getattr(METHODS.get(self.method), "streams", None)
        if served is not None and self.stream not in served:
            raise ConfigError(
                f"method {self.method!r} serves only {', '.join(served)} streams, not {self.stream!r}; "
                f"choose --stream {served[0]}"
            )
        if not getattr(STREAMS.get(self.stream), "single_shot", True) and self.single_shot_every != 0:
            raise ConfigError(
                f"stream {self.stream!r} has no single-shot counterfactual: its request t's model has learned data "
                f"the pretrained model never saw; add --single-shot-every 0"
            )
        check_method_arguments(self.method, METHODS.get(self.method), self.method_args)
        self._validate_guards()
        self._validate_numbers()  # reads the tuned file: a missing or malformed one fails here, before any data
        refuse_unread_settings(self.method, METHODS.get(self.method), self.method_args)
        self.hardware.validate()
        for path in (self.out, self.store, self.run_dir):
            if path is not None:
                check_path_length(path)
                check_writable_directory(path)

    def _validate_numbers(self) -> None:
        """Counts, sizes, seeds and hyperparameters that would fail late, hang or be silently changed.

        A method's hyperparameters are also checked against the valid ranges it declares
        (`ranges.py`): SalUn's `ratio: 1.5` used to crash at request 1, after pretraining.

        Lightning reads `max_epochs=-1` as "train forever"; a batch size of 0 fails only when the
        first fit starts; a NaN learning rate trains a NaN model (and, since NaN != NaN, the run
        then refuses its own folder). All of these are refused here, before any data is loaded.
        """
        check_run_numbers({f.name: getattr(self, f.name) for f in fields(self)})
        method = METHODS.get(self.method)
        defaults = {name: p.default for name, p in parameters(method).items()}
        check_numbers(paths(self.method_args, groups(method)), defaults, f"method {self.method!r} argument")
        resolved = paths(self.method_kwargs(), groups(method))
        check_ranges(valid_ranges(method), resolved, f"method {self.method!r} argument")
        for guard, args in self.guard_args.items():
            defaults = {name: p.default for name, p in inspect.signature(GUARDS.get(guard)).parameters.items()}
            check_numbers(args, defaults, f"guard {guard!r} argument")
        known = getattr(DATASETS.get(self.dataset), "known_size", None)
        if known is not None:
            check_stream_size(
                STREAMS.get(self.stream), known, self.requests, self.size, self.dataset_args.get("train_size")
            )

    @functools.cached_property
    def tuned(self) -> dict | None:
        """The tuned hyperparameter file of this (dataset, arch, stream, method) under `hparams`, if given: read once
        per config (validation, ranges, identity and arguments all ask for it; the config is frozen, so the file
        read first is the one every part of the plan uses)."""
        from unlearnbench.hparams import load_tuned

        return load_tuned(self.hparams, self.dataset, self.arch, self.stream, self.method) if self.hparams else None

    def method_kwargs(self) -> dict:
        """The method's keyword arguments: tuned values (with `hparams`), overridden by those given explicitly, a
        group's (`optim: {lr: ...}`) field by field."""
        from unlearnbench.methods.base import method_arguments

        tuned = self.tuned
        return method_arguments(METHODS.get(self.method), tuned["hparams"] if tuned else {}, self.method_args)

    def oracle_at(self, t: int) -> bool:
        """Whether request t is scored against an oracle (retrained at t = K, 2K, ... and T)."""
        return self.oracle == "retrain" and scheduled(t, self.requests, self.oracle_every)

    def single_shot_at(self, t: int) -> bool:
        """Whether request t is also served single-shot from the pretrained model (its counterfactual)."""
        every = self.single_shot_every
        if every is None:  # the oracle's schedule, so that the gain sits beside the gap; T alone without oracles
            every = self.oracle_every if self.oracle == "retrain" else self.requests
        return every > 0 and scheduled(t, self.requests, every)

    def relearn_at(self, t: int) -> bool:
        """Whether the relearning attack is run after request t (`--relearn-every`)."""
        return self.relearn_every > 0 and scheduled(t, self.requests, self.relearn_every)

    def quantize_at(self, t: int) -> bool:
        """Whether the models of request t are also scored with quantized weights (`--quantize-every`)."""
        return self.quantize_every > 0 and scheduled(t, self.requests, self.quantize_every)

    @property
    def single_shot_kinds(self) -> tuple[str, ...]:
        """The counterfactuals served at a scheduled request: `single_task`, `cumulative`, or both."""
        return ("single_task", "cumulative") if self.single_shot_baseline == "both" else (self.single_shot_baseline,)

    def resolved_seed(self, part: str) -> int:
        """`train_seed`, `unlearn_seed` or `stream_seed`: its own value where given, else `seed`."""
        value = getattr(self, part)
        return self.seed if value is None else value

    @property
    def oracle_train_seeds(self) -> list[int]:
        """The train seeds of a request's K oracles; the first is the pretrained model's own."""
        return [self.resolved_seed("train_seed") + k for k in range(self.oracle_seeds)]

    @property
    def store_dir(self) -> Path:
        return self.store if self.store is not None else self.out / "store"

    def identity(self, method_hparams: dict, recipe: dict, size: float) -> RunIdentity:
        """Everything the numbers depend on: saved as config.yaml and hashed into the run's name.

        Normalized through JSON so that it compares equal to its own YAML round trip. What departs
        from a default only when used (dataset and arch arguments, schedules, guards, tuning, split,
        seed parts) is left out of the file by `RunIdentity.to_json`, so other runs keep their names.
        """
        from unlearnbench.data.cache import check_dataset_args
        from unlearnbench.evaluation.keys import load_metric_plugins, user_gap_metrics
        from unlearnbench.training import check_arch_args

        tuned = self.tuned
        load_metric_plugins()
        built = {  # the fields that are not this config's field of the same name
            "method_args": method_hparams,
            # `--size 2` parses as 2.0 and a YAML `size: 2` as 2: one run, so one name
            "size": int(size) if float(size).is_integer() else float(size),
            "recipe": recipe,
            "precision": self.hardware.unified_precision(),
            "dataset_args": check_dataset_args(self.dataset, self.dataset_args) or None,
            "arch_args": check_arch_args(self.arch, self.arch_args) or None,
            "guards": [{name: self.resolved_guard_args(name)} for name in self.guards] or None,  # in order of use
            "tuned": marker(tuned["provenance"]) if tuned else None,  # where the hyperparameters came from
            "metrics": user_gap_metrics(),  # a gap that averages a user's metric too is another gap
            # an evaluation's settings only where it runs, so a run without it keeps its name whatever they are
            **{
                name: getattr(self, name) if self.relearn_every else None
                for name in ("relearn_steps", "relearn_fraction", "relearn_margin")
            },
            "quantize_bits": list(self.quantize_bits) if self.quantize_every else None,
            # a seed part is recorded only where it departs from `seed`, so `--seed S` alone keeps its name
            **{
                part: None if self.resolved_seed(part) == self.seed else self.resolved_seed(part) for part in SEED_PARTS
            },
        }
        copied = {f.name: getattr(self, f.name) for f in fields(RunIdentity) if f.name not in built}
        identity = RunIdentity(**copied, **built)
        return RunIdentity.from_json(json.loads(json.dumps(identity.to_json(), default=str)))

    def run_path(self, identity: RunIdentity) -> Path:
        """`--run-dir` if given, else OUT/<method>-<stream>-...-<hash of the identity>."""
        from unlearnbench.rundir import identity_hash

        if self.run_dir is not None:
            return self.run_dir
        tags = "".join(
            f"-{tag}" for tag, used in (("tuned", self.hparams), ("validation", self.split != "test")) if used
        )
        digest = identity_hash(identity)
        name = f"{'+'.join([self.method, *self.guards])}{tags}-{self.stream}-{self.dataset}-{self.arch}-T{self.requests}-seed{self.seed}-{digest}"
        if len(name.encode()) > NAME_MAX:  # cut before its hash, which still tells runs apart; shorter names stay
            name = name.encode()[: NAME_MAX - len(digest) - 1].decode(errors="ignore") + f"-{digest}"
        return self.out / name

    def _validate_guards(self) -> None:
        from unlearnbench.methods.base import FitMethod

        for name in self.guards:
            check_folder_part("guard", name)
            if name not in GUARDS:
                raise ConfigError(f"unknown guard {name!r}; choose one of: {', '.join(GUARDS.names())}")
        if len(set(self.guards)) != len(self.guards):
            raise ConfigError(f"guard listed twice: {', '.join(self.guards)}")
        if self.guards and not issubclass(METHODS.get(self.method), FitMethod):
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


#: The longest file or folder name (bytes) and the longest path the usual file systems (ext4, xfs, APFS) take.
NAME_MAX, PATH_MAX = 255, 4096
#: Room left in a path for what goes inside an output folder: a run directory's name and its longest file's.
INSIDE_AN_OUTPUT_FOLDER = NAME_MAX + 64


def check_path_length(path: Path) -> None:
    """`path` and what will be written inside it fit the file system's limits (else `File name too long` mid-run)."""
    long_parts = [part for part in path.parts if len(part.encode()) > NAME_MAX]
    if long_parts:
        raise ConfigError(
            f"the folder name {long_parts[0][:40]}... is {len(long_parts[0].encode())} bytes long, more than the "
            f"{NAME_MAX} a file system allows; choose a shorter one"
        )
    length = len(str(path.resolve()).encode()) + INSIDE_AN_OUTPUT_FOLDER
    if length > PATH_MAX:
        raise ConfigError(
            f"{str(path)[:60]}... is too deep: the files written inside it would have paths of up to {length} bytes, "
            f"more than the {PATH_MAX} a file system allows; choose a shorter folder"
        )


def scheduled(t: int, requests: int, every: int) -> bool:
    """t = K, 2K, ... and always the last request T: the requests a schedule `--*-every K` covers."""
    return t % every == 0 or t == requests


def _valid_devices(devices: object) -> bool:
    """What Lightning's `devices=` accepts: a count >= 1, -1 (every device), "auto", or device ids ("0,1")."""
    if is_int(devices):
        return devices >= 1 or devices == -1
    if isinstance(devices, list):  # a suite's `devices: [0, 1]`
        return bool(devices) and all(is_int(d) and d >= 0 for d in devices)
    if not isinstance(devices, str):
        return False
    text = devices.strip()
    ids = [part.strip() for part in text.strip("[]").split(",") if part.strip()]
    return text in ("auto", "-1") or ("," in text and bool(ids) and all(part.isdigit() for part in ids))
