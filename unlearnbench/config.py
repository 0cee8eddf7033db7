"""`RunConfig`: one (method, stream, seed) run, validated before anything is written."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import typing
import warnings
from collections.abc import Iterable
from dataclasses import Field, asdict, dataclass, field, fields
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

__all__ = [
    "ArchSpec",
    "ConfigError",
    "DamagedFileError",
    "DataSpec",
    "GuardSpec",
    "Hardware",
    "MethodSpec",
    "Output",
    "Protocol",
    "RunConfig",
    "Seeds",
    "StreamSpec",
    "check_numbers",
]


def option(default: object, help: str | None, registry: str | None = None, flag: str | None = None):
    """A field of a run's part: its default and, for one that is a command-line option of its own, its `--help`
    line and, for a name chosen from a registry, that registry's name in `unlearnbench.registry` (the help then lists
    its entries). `flag`: the option's name where it is not the field's (`--stream` is `StreamSpec.kind`). A mutable
    default is copied for each instance."""
    metadata = {"help": help, "registry": registry, "flag": flag}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Hardware:
    """Passed through to Lightning's Trainer unchanged."""

    accelerator: str = option("auto", "Lightning's accelerator: auto (default), cpu, gpu, ...")
    devices: int | str | list[int] = option(
        1, "devices per node: a count, -1 (all), auto, or ids such as 0,1 or [0, 1]"
    )
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
class MethodSpec:
    """The method: a registered name, its arguments as given (its SGD settings a group, `optim: {lr: ...}`), and
    where tuned values come from."""

    name: str = field(metadata={"help": None, "registry": None, "flag": "method"})  # required: no default
    #: the method's arguments as given (`--salun.ratio 0.3`, a YAML `salun: {optim: {lr: 0.1}}`)
    args: dict = option({}, None, flag="method_args")
    hparams: Path | None = option(
        None, "folder of `unlearnbench tune` files: the method starts from its tuned values (explicit ones win)"
    )


@dataclass(frozen=True)
class StreamSpec:
    """The request stream: its kind, how much each request forgets, and how many requests there are."""

    kind: str = option("classwise", "the request stream", registry="STREAMS", flag="stream")
    size: float | None = option(
        None,
        "classes per request (classwise, default 1) or fraction of the train set per request (random, default 0.01)",
    )
    requests: int = option(5, "number of unlearning requests T")


@dataclass(frozen=True)
class DataSpec:
    """The dataset, its arguments and where it is read."""

    name: str = option("digits", "the dataset", registry="DATASETS", flag="dataset")
    #: dataset arguments (`--dataset.train_size N`): the factory's keywords plus train_size/test_size subsets
    args: dict = option({}, None, flag="dataset_args")
    dir: Path | None = option(
        None, "folder of on-disk datasets (default $UNLEARNBENCH_DATA or ./data)", flag="data_dir"
    )
    download: bool = option(False, "fetch a missing dataset into --data-dir")
    #: "test": the dataset as it is; "validation": tuning's view, the test split replaced by a held-out
    #: part of train (unlearnbench.data.validation). Validation runs never enter a leaderboard.
    split: Literal["test", "validation"] = option("test", None)


@dataclass(frozen=True)
class ArchSpec:
    """The model and the recipe it is pretrained (and its oracles retrained) with."""

    name: str = option("smallcnn", "the model", registry="ARCHS", flag="arch")
    #: arch arguments (`--arch.width 16`): the arch factory's keywords the dataset does not fix
    args: dict = option({}, None, flag="arch_args")
    recipe: dict = option({}, "overrides of the pretraining/oracle recipe")


@dataclass(frozen=True)
class Seeds:
    """The run's seed and its parts (SUPREME, arXiv 2510.26714: one seed for all hides the variance of each)."""

    seed: int = option(
        0,
        "the seed of everything the parts below leave unset: pretraining and oracles, the method's randomness, the "
        "stream, the attacks' subsampling",
    )
    train_seed: int | None = option(None, "pretraining and oracles, and the model store's key (default --seed)")
    unlearn_seed: int | None = option(None, "the method's randomness and batch order (default --seed)")
    stream_seed: int | None = option(None, "the stream's manifest (default --seed)")

    def resolved(self, part: str) -> int:
        """`train_seed`, `unlearn_seed` or `stream_seed`: its own value where given, else `seed`."""
        value = getattr(self, part)
        return self.seed if value is None else value


@dataclass(frozen=True)
class Protocol:
    """What is measured after each request, and when: oracles, counterfactuals, attacks, quantization."""

    oracle: Literal["retrain", "none"] = option("retrain", "retrain (default) or none: no gap")
    oracle_every: int = option(
        1,
        "oracles (gap, oracle attack) at t = K, 2K, ... and T only (default 1: every request): a T = 100 stream need "
        "not retrain 100 models",
    )
    oracle_seeds: int = option(
        1, "K oracles per request, train seeds train_seed..train_seed+K-1 (RMIA references; ε score)"
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


@dataclass(frozen=True)
class GuardSpec:
    """One plasticity guard (unlearnbench.guards) and its arguments as given."""

    name: str
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Output:
    """Where the run is written and logged: nothing its numbers depend on."""

    out: Path = option(Path("runs"), "folder of run directories")
    store: Path | None = option(None, "model store (default OUT/store)")
    run_dir: Path | None = option(None, "exact run directory (default: named by config)")
    save_logits: bool = option(False, "save every model's logits beside its scores")
    logger: str = option(
        "csv", "experiment logger (csv, the default, writes into the run directory)", registry="LOGGERS"
    )


#: The parts of a run, in the order `run --help` shows them: (`RunConfig` attribute, the part's class, its heading).
PARTS = (
    ("method", MethodSpec, "method"),
    ("stream", StreamSpec, "request stream"),
    ("data", DataSpec, "data"),
    ("arch", ArchSpec, "model"),
    ("seeds", Seeds, "seeds"),
    ("protocol", Protocol, "evaluation protocol"),
    ("output", Output, "output"),
    ("hardware", Hardware, "hardware (passed to Lightning's Trainer)"),
)


def option_name(spec: Field) -> str:
    """A part's field's run option name (`stream`, `requests`, `dataset_args`): what the command line, a YAML file, a
    suite and a run's record call it."""
    return spec.metadata.get("flag") or spec.name


#: Every run option by its name: (the `RunConfig` part holding it, the part's class, its field), in `PARTS`' order.
RUN_OPTIONS = {option_name(spec): (part, cls, spec) for part, cls, _ in PARTS for spec in fields(cls)}
#: The guards part's options: the names in the order they apply, and each one's arguments (a list of `GuardSpec`).
GUARD_OPTIONS = ("guards", "guard_args")


def declared_options(names: Iterable[str]) -> list[tuple[str, type, Field]]:
    """(name, its part's class, its field) of each of the run options `names`: what a parser makes an option of."""
    return [(name, *RUN_OPTIONS[name][1:]) for name in names]


@dataclass(frozen=True)
class RunConfig:
    """One run, frozen once built, in parts: the method, the stream, the data, the arch, the seeds, the evaluation
    protocol, the guards, the output and the hardware. Each option of `unlearnbench run` is declared once, as a
    field of its part, with its type, default and help.

    The run's options are its vocabulary everywhere outside this class: `run --requests 3`, a YAML `requests: 3`, a
    suite's `common`, a run's record (`records.RunIdentity`) all name them flat (`RUN_OPTIONS` maps each to its
    part), so a new run option is one field of a part. `from_options` builds a config from them and `options` gives
    them back.
    """

    method: MethodSpec
    stream: StreamSpec = field(default_factory=StreamSpec)
    data: DataSpec = field(default_factory=DataSpec)
    arch: ArchSpec = field(default_factory=ArchSpec)
    seeds: Seeds = field(default_factory=Seeds)
    protocol: Protocol = field(default_factory=Protocol)
    #: plasticity guards (unlearnbench.guards), applied in this order
    guards: tuple[GuardSpec, ...] = ()
    output: Output = field(default_factory=Output)
    hardware: Hardware = field(default_factory=Hardware)

    @classmethod
    def from_options(cls, **options: object) -> RunConfig:
        """The run of options by name (`RUN_OPTIONS`, and `guards` with `guard_args`): `method` required, every other
        option at its default where absent. A name that is no run option is a TypeError, as a dataclass's is."""
        unknown = sorted(set(options) - set(RUN_OPTIONS) - set(GUARD_OPTIONS))
        if unknown:
            raise TypeError(f"no run option(s) {', '.join(unknown)}")
        if "method" not in options:
            raise TypeError("a run needs a method")
        parts: dict[str, dict] = {part: {} for part, _, _ in PARTS}
        for name, value in options.items():
            if name not in GUARD_OPTIONS:
                part, _, spec = RUN_OPTIONS[name]
                parts[part][spec.name] = value
        guard_args = options.get("guard_args") or {}
        guards = tuple(GuardSpec(name, dict(guard_args.get(name) or {})) for name in options.get("guards") or ())
        for name in guard_args:
            if name not in {guard.name for guard in guards}:
                raise ConfigError(f"arguments given for guard {name!r}, which is not selected; add --guard {name}")
        return cls(**{part: part_cls(**parts[part]) for part, part_cls, _ in PARTS}, guards=guards)

    def options(self) -> dict[str, object]:
        """The run's options by name, as `from_options` takes them (`from_options(c.options()) == c`)."""
        options = {name: getattr(getattr(self, part), spec.name) for name, (part, _, spec) in RUN_OPTIONS.items()}
        options["guards"] = self.guard_names
        options["guard_args"] = {guard.name: guard.args for guard in self.guards if guard.args}
        return options

    def replace(self, **options) -> RunConfig:
        """This run with some options (by name) changed; its mappings and lists copied, not shared with this one."""
        return RunConfig.from_options(**copy.deepcopy(self.options()) | options)

    @property
    def guard_names(self) -> list[str]:
        """The guards' names, in the order they apply (a run directory's name lists them so)."""
        return [guard.name for guard in self.guards]

    def validate(self) -> None:
        """Names, method arguments and output location; the stream itself is checked when built."""
        from unlearnbench.data.cache import check_dataset_args
        from unlearnbench.methods.base import check_method_arguments, refuse_unread_settings
        from unlearnbench.training import check_arch_args

        method, stream, data, arch = self.method, self.stream, self.data, self.arch
        for registry, name in (
            (METHODS, method.name),
            (STREAMS, stream.kind),
            (DATASETS, data.name),
            (ARCHS, arch.name),
        ):
            check_folder_part(registry.kind, name)
            try:
                registry.get(name)  # plain names, and open families such as timm:<model>
            except UnknownNameError as error:
                raise ConfigError(str(error)) from None
        try:
            check_dataset_args(data.name, data.args)
            check_arch_args(arch.name, arch.args)
        except ValueError as error:  # DatasetError or the arch check's: bad arguments, found before loading
            raise ConfigError(str(error)) from None
        options = self.options()
        check_run_choices({name: options[name] for name in CHOICES})
        if self.output.logger not in LOGGERS:
            raise ConfigError(f"unknown logger {self.output.logger!r}; choose one of: {', '.join(LOGGERS.names())}")
        LOGGERS.get(self.output.logger).check_environment()
        check_recipe(arch.recipe)
        method_cls = METHODS.get(method.name)
        served = getattr(method_cls, "streams", None)
        if served is not None and stream.kind not in served:
            raise ConfigError(
                f"method {method.name!r} serves only {', '.join(served)} streams, not {stream.kind!r}; "
                f"choose --stream {served[0]}"
            )
        if not getattr(STREAMS.get(stream.kind), "single_shot", True) and self.protocol.single_shot_every != 0:
            raise ConfigError(
                f"stream {stream.kind!r} has no single-shot counterfactual: its request t's model has learned data "
                f"the pretrained model never saw; add --single-shot-every 0"
            )
        check_method_arguments(method.name, method_cls, method.args)
        self._validate_guards()
        self._validate_numbers(options)  # reads the tuned file: a missing or malformed one fails here, before any data
        refuse_unread_settings(method.name, method_cls, method.args)
        self.hardware.validate()
        for path in (self.output.out, self.output.store, self.output.run_dir):
            if path is not None:
                check_path_length(path)
                check_writable_directory(path)

    def _validate_numbers(self, options: dict[str, object]) -> None:
        """Counts, sizes, seeds and hyperparameters that would fail late, hang or be silently changed.

        A method's hyperparameters are also checked against the valid ranges it declares
        (`ranges.py`): SalUn's `ratio: 1.5` used to crash at request 1, after pretraining.

        Lightning reads `max_epochs=-1` as "train forever"; a batch size of 0 fails only when the
        first fit starts; a NaN learning rate trains a NaN model (and, since NaN != NaN, the run
        then refuses its own folder). All of these are refused here, before any data is loaded.
        """
        check_run_numbers(options)
        method = METHODS.get(self.method.name)
        what = f"method {self.method.name!r} argument"
        defaults = {name: p.default for name, p in parameters(method).items()}
        check_numbers(paths(self.method.args, groups(method)), defaults, what)
        check_ranges(valid_ranges(method), paths(self.method_kwargs(), groups(method)), what)
        for guard in self.guards:
            defaults = {name: p.default for name, p in inspect.signature(GUARDS.get(guard.name)).parameters.items()}
            check_numbers(guard.args, defaults, f"guard {guard.name!r} argument")
        known = getattr(DATASETS.get(self.data.name), "known_size", None)
        if known is not None:
            stream = self.stream
            train_size = self.data.args.get("train_size")
            check_stream_size(STREAMS.get(stream.kind), known, stream.requests, stream.size, train_size)

    @functools.cached_property
    def tuned(self) -> dict | None:
        """The tuned hyperparameter file of this (dataset, arch, stream, method) under `hparams`, if given: read once
        per config (validation, ranges, identity and arguments all ask for it; the config is frozen, so the file
        read first is the one every part of the plan uses)."""
        from unlearnbench.hparams import load_tuned

        hparams = self.method.hparams
        return load_tuned(hparams, *self.setting, self.method.name) if hparams else None

    @property
    def setting(self) -> tuple[str, str, str]:
        """(dataset, arch, stream kind): what a tuned file and a study are named by, besides the method."""
        return self.data.name, self.arch.name, self.stream.kind

    def method_kwargs(self) -> dict:
        """The method's keyword arguments: tuned values (with `hparams`), overridden by those given explicitly, a
        group's (`optim: {lr: ...}`) field by field."""
        from unlearnbench.methods.base import method_arguments

        tuned = self.tuned
        return method_arguments(METHODS.get(self.method.name), tuned["hparams"] if tuned else {}, self.method.args)

    def oracle_at(self, t: int) -> bool:
        """Whether request t is scored against an oracle (retrained at t = K, 2K, ... and T)."""
        protocol = self.protocol
        return protocol.oracle == "retrain" and scheduled(t, self.stream.requests, protocol.oracle_every)

    def single_shot_at(self, t: int) -> bool:
        """Whether request t is also served single-shot from the pretrained model (its counterfactual)."""
        protocol, requests = self.protocol, self.stream.requests
        every = protocol.single_shot_every
        if every is None:  # the oracle's schedule, so that the gain sits beside the gap; T alone without oracles
            every = protocol.oracle_every if protocol.oracle == "retrain" else requests
        return every > 0 and scheduled(t, requests, every)

    def relearn_at(self, t: int) -> bool:
        """Whether the relearning attack is run after request t (`--relearn-every`)."""
        every = self.protocol.relearn_every
        return every > 0 and scheduled(t, self.stream.requests, every)

    def quantize_at(self, t: int) -> bool:
        """Whether the models of request t are also scored with quantized weights (`--quantize-every`)."""
        every = self.protocol.quantize_every
        return every > 0 and scheduled(t, self.stream.requests, every)

    @property
    def single_shot_kinds(self) -> tuple[str, ...]:
        """The counterfactuals served at a scheduled request: `single_task`, `cumulative`, or both."""
        baseline = self.protocol.single_shot_baseline
        return ("single_task", "cumulative") if baseline == "both" else (baseline,)

    @property
    def oracle_train_seeds(self) -> list[int]:
        """The train seeds of a request's K oracles; the first is the pretrained model's own."""
        return [self.seeds.resolved("train_seed") + k for k in range(self.protocol.oracle_seeds)]

    @property
    def store_dir(self) -> Path:
        return self.output.store if self.output.store is not None else self.output.out / "store"

    def identity(self, method_hparams: dict, recipe: dict, size: float) -> RunIdentity:
        """Everything the numbers depend on: saved as config.yaml and hashed into the run's name.

        Normalized through JSON so that it compares equal to its own YAML round trip. What departs
        from a default only when used (dataset and arch arguments, schedules, guards, tuning, split,
        seed parts) is left out of the file by `RunIdentity.to_json`, so other runs keep their names.
        The record names the run's options flat (`options`), as the command line does.
        """
        from unlearnbench.data.cache import check_dataset_args
        from unlearnbench.evaluation.keys import load_metric_plugins, user_gap_metrics
        from unlearnbench.training import check_arch_args

        tuned, options, protocol, seeds = self.tuned, self.options(), self.protocol, self.seeds
        load_metric_plugins()
        built = {  # the fields that are not this config's option of the same name
            "method_args": method_hparams,
            "size": size_key(size),
            "recipe": recipe,
            "precision": self.hardware.unified_precision(),
            "dataset_args": check_dataset_args(self.data.name, self.data.args) or None,
            "arch_args": check_arch_args(self.arch.name, self.arch.args) or None,
            "guards": [{guard.name: self.resolved_guard_args(guard)} for guard in self.guards] or None,  # in order
            "tuned": marker(tuned["provenance"]) if tuned else None,  # where the hyperparameters came from
            "metrics": user_gap_metrics(),  # a gap that averages a user's metric too is another gap
            # an evaluation's settings only where it runs, so a run without it keeps its name whatever they are
            **{
                name: options[name] if protocol.relearn_every else None
                for name in ("relearn_steps", "relearn_fraction", "relearn_margin")
            },
            "quantize_bits": list(protocol.quantize_bits) if protocol.quantize_every else None,
            # a seed part is recorded only where it departs from `seed`, so `--seed S` alone keeps its name
            **{part: None if seeds.resolved(part) == seeds.seed else seeds.resolved(part) for part in SEED_PARTS},
        }
        copied = {f.name: options[f.name] for f in fields(RunIdentity) if f.name not in built}
        identity = RunIdentity(**copied, **built)
        return RunIdentity.from_json(json.loads(json.dumps(identity.to_json(), default=str)))

    def run_path(self, identity: RunIdentity) -> Path:
        """`--run-dir` if given, else OUT/<method>-<stream>-...-<hash of the identity>."""
        from unlearnbench.rundir import identity_hash

        output = self.output
        if output.run_dir is not None:
            return output.run_dir
        used = (("tuned", self.method.hparams), ("validation", self.data.split != "test"))
        tags = "".join(f"-{tag}" for tag, is_used in used if is_used)
        digest = identity_hash(identity)
        method = "+".join([self.method.name, *self.guard_names])
        name = (
            f"{method}{tags}-{self.stream.kind}-{self.data.name}-{self.arch.name}-T{self.stream.requests}"
            f"-seed{self.seeds.seed}-{digest}"
        )
        if len(name.encode()) > NAME_MAX:  # cut before its hash, which still tells runs apart; shorter names stay
            name = name.encode()[: NAME_MAX - len(digest) - 1].decode(errors="ignore") + f"-{digest}"
        return output.out / name

    def _validate_guards(self) -> None:
        from unlearnbench.methods.base import FitMethod

        names = self.guard_names
        for name in names:
            check_folder_part("guard", name)
            if name not in GUARDS:
                raise ConfigError(f"unknown guard {name!r}; choose one of: {', '.join(GUARDS.names())}")
        if len(set(names)) != len(names):
            raise ConfigError(f"guard listed twice: {', '.join(names)}")
        if names and not issubclass(METHODS.get(self.method.name), FitMethod):
            raise ConfigError(
                f"guard(s) {', '.join(names)} act on training by gradient steps, which method "
                f"{self.method.name!r} does not do; run it without --guard"
            )
        for guard in self.guards:
            accepted = inspect.signature(GUARDS.get(guard.name)).parameters
            unknown = sorted(set(guard.args) - set(accepted))
            if unknown:
                raise ConfigError(
                    f"guard {guard.name!r} has no argument(s) {', '.join(unknown)}; its arguments are: "
                    f"{', '.join(accepted)}"
                )

    @staticmethod
    def resolved_guard_args(guard: GuardSpec) -> dict:
        """A guard's arguments with its defaults filled in (the run identity records all of them)."""
        defaults = {k: p.default for k, p in inspect.signature(GUARDS.get(guard.name)).parameters.items()}
        return defaults | guard.args


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


def size_key(size: float | None) -> float | None:
    """A stream's size as names and hashes record it: `--size 2` parses as 2.0 and a YAML `size: 2` as 2 (an older
    suite cell's, or a tuned file's), one size, so one name."""
    return size if size is None else int(size) if float(size).is_integer() else float(size)


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
