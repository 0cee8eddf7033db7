"""`UnlearningMethod`, the LightningModule every unlearning method subclasses, and `GradientMethod`.

A method declares its hyperparameters as typed `__init__` arguments (defaults from its reference
implementation; the CLI and configs override them), picks a `BatchMode`, and serves each request:
`prepare(request, data)` for work done once per request (a saliency mask, a teacher copy), then
`unlearn(fit)`. A method that trains by gradient steps subclasses `GradientMethod`, which takes the
SGD settings as one typed group (`optim: SGDSettings`), implements `loss(batch)` and may override
`after_step()` (re-apply a mask); `fit(epochs)` runs Lightning's loop. A method that is no gradient
loop over data (a weight edit, LOFT's subspace) subclasses `UnlearningMethod` and overrides
`unlearn(fit)`. The training loop is Lightning's, never the method's, and the runner treats every
method the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.early_checks import check_group_mapping, check_group_spelling
from unlearnbench.errors import ConfigError
from unlearnbench.lean_module import LeanModule
from unlearnbench.methods.gradients import on_device
from unlearnbench.ranges import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Range, groups, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Distribution
from unlearnbench.streams.base import NarrowedView, StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


class ResumeStateError(ConfigError):
    """A saved method state that the method cannot take back (its code changed since it was saved)."""


@dataclass(frozen=True)
class SGDSettings:
    """The optimizer settings of a gradient method: `--<method>.optim.lr`, YAML `<method>: {optim: {lr: ...}}`.

    A method's own defaults are its group default (`optim: SGDSettings = SGDSettings(lr=0.013)`, each
    value citing its source); a value given overrides that default field by field. Everything else names a
    field by its path in the group too: tuned files (`hparams: {optim: {lr: ...}}`), search spaces and valid
    ranges (`optim.lr`), the method's `hparams` and the run identity (`method_args: {optim: {...}}`).

    Args:
        lr: learning rate of the method's optimizer (SGD unless the method says otherwise).
        epochs: passes over the request's batches.
        batch_size: samples per batch of the request's loaders.
        momentum: SGD momentum (a method that trains with Adam refuses it at any value but its default).
        weight_decay: weight decay (L2 penalty on the trained parameters).
    """

    #: What each setting accepts; a run outside them is refused before any data is loaded.
    valid_ranges: ClassVar[Mapping[str, Range]] = ranges(
        lr=POSITIVE,
        epochs=AT_LEAST_ONE,
        batch_size=AT_LEAST_ONE,
        momentum=Range(0, 1, high_open=True),
        weight_decay=NON_NEGATIVE,
    )

    lr: float = 0.01
    epochs: int = 10
    batch_size: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-4


class UnlearningMethod(LeanModule):
    """Base class: serves one request at a time, reading the request's data in batches of `batch_size`.

    `hparams` records the hyperparameters, a group as the mapping of its fields, as the run identity and tuned
    files name them. Every method reads data in batches, so every method has a `batch_size`: a gradient method's
    is among its SGD settings (`optim.batch_size`), any other method declares its own.
    """

    batch_mode: ClassVar[BatchMode] = BatchMode.RETAIN
    #: The stream kinds the method serves (None: every kind); a run on another kind is refused, as bad
    #: input, before any data is loaded (UNSIR learns noise per forgotten class: class-wise only).
    streams: ClassVar[tuple[str, ...] | None] = None
    #: What `unlearnbench tune` may vary: hyperparameter path (`optim.lr`) -> a `search_space` record (Float, Int,
    #: Categorical). Every registered method declares one; the registry-wide test refuses a method without.
    search_space: ClassVar[Mapping[str, Distribution] | None] = None
    #: Valid values of the hyperparameters by name (`ranges.Range`); a subclass declares its own arguments only, its
    #: bases' and its groups' classes' ranges apply too. A run outside them is refused before any data is loaded.
    valid_ranges: ClassVar[Mapping[str, Range]] = ranges(batch_size=AT_LEAST_ONE)

    def __init__(self):
        super().__init__()
        self.save_hyperparameters()
        self.model: nn.Module | None = None
        self.num_classes = 0

    @property
    def batch_size(self) -> int:
        """Samples per batch of the request's loaders (the runner's and the guards' batches)."""
        return self.hparams.batch_size

    def attach(self, model: nn.Module, num_classes: int) -> UnlearningMethod:
        """Give the method the model it will unlearn from (the pretrained model before request 1)."""
        self.model = model
        self.num_classes = num_classes
        return self

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def code_parts(self) -> tuple[type, ...]:
        """The classes whose code this method runs beyond its class and what its modules import: ones it finds by
        name at run time (a staged method's stages), which its import closure cannot see. A run's recorded code
        (`provenance.method_code`) hashes their modules too, so editing one is a change of this method."""
        return ()

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        """Work done once per request before training; timed separately as `prepare_s`."""

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement loss() or override unlearn()")

    def after_step(self) -> None:
        """Called after every optimizer step."""

    def unlearn(self, fit: Callable[[int], None]) -> None:
        """Serve the current request; `fit(epochs)` runs Lightning's loop over the request's batches."""
        raise NotImplementedError(f"{type(self).__name__} must implement unlearn(fit), or subclass GradientMethod")

    def resume_state(self) -> dict[str, Tensor]:
        """What a resumed run needs after request t: the model, and what the method keeps across requests.

        A method keeps state across requests by `get_extra_state`/`set_extra_state` (LOFT's U,
        continual LOFT's earlier covariances). Anything else it registers — a teacher copied in
        `prepare`, a frozen snapshot — is per-request scratch, rebuilt by the next `prepare`: saving
        it would make the resumed method, which has none yet, refuse its own checkpoint.
        """
        return {k: v for k, v in self.state_dict().items() if k.startswith("model.") or k == "_extra_state"}

    def load_resume_state(self, state: dict[str, Tensor]) -> None:
        """Load `resume_state()` of an earlier session; scratch the method already registered is left alone."""
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [key for key in missing if key.startswith("model.") or key == "_extra_state"]
        if missing or unexpected:
            raise ResumeStateError(
                f"the saved state of {type(self).__name__} does not fit it (missing {missing[:3]}, unexpected "
                f"{unexpected[:3]}): keep state across requests in get_extra_state/set_extra_state, or delete "
                f"the run directory to rerun"
            )

    def on_train_start(self) -> None:
        # Lightning keeps each submodule's mode; the model arrives in eval mode from evaluation.
        self.train()

    def training_step(self, batch: dict[str, Batch], batch_idx: int) -> Tensor:
        return self.loss(batch)  # logged by the runner's `StepLossLogger`, not `self.log` (see there)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        self.after_step()


class FitMethod(UnlearningMethod):
    """A method whose `unlearn` trains by Lightning fits (`fit(epochs)`), so the runner's callbacks act on its training.

    Plasticity guards are such callbacks: they compose with a `FitMethod` and are refused for any other
    method (a weight edit, LOFT's subspace), whose training would never call them. Eligibility is the
    class a method derives from, never a flag it could forget to set.
    """


class GradientMethod(FitMethod):
    """A method trained by gradient steps: SGD with momentum over the model's trainable parameters, constant lr.

    Its optimizer settings are one group, `optim` (`SGDSettings`), passed by keyword; a subclass gives
    its reference's values as the group default and never repeats the settings as arguments of its own.

    Args:
        optim: the optimizer settings (learning rate, epochs, batch size, momentum, weight decay).
    """

    #: the optimizer `configure_optimizers` builds, and the settings of `optim` it does not read: given at another
    #: value than their default, they are refused (`refuse_unread_settings`)
    optimizer_name: ClassVar[str] = "SGD"
    unread_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, optim: SGDSettings = SGDSettings()):
        super().__init__()
        self.optim = optim
        self.hparams.optim = asdict(optim)  # a mapping, as the run identity records it

    @property
    def batch_size(self) -> int:
        return self.optim.batch_size

    def unlearn(self, fit: Callable[[int], None]) -> None:
        fit(self.optim.epochs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=self.optim.lr,
            momentum=self.optim.momentum,
            weight_decay=self.optim.weight_decay,
        )


class PairedManualMethod(GradientMethod):
    """A `GradientMethod` on paired forget/retain batches that takes its optimizer steps itself (SCRUB, MUNBa, SFR-on).

    Its `training_step` calls `manual_step`, as often per batch as it needs. Paired batches cycle the shorter set, so
    of an epoch's steps only the first `forget_batches` (set by `prepare`) see a forget batch not seen before in it.
    """

    batch_mode = BatchMode.PAIRED

    def __init__(self, optim: SGDSettings = SGDSettings()):
        super().__init__(optim=optim)
        self.automatic_optimization = False
        self.forget_batches = 0

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.forget_batches = batches_in(len(request.forget), self.batch_size)

    def manual_step(self, loss: Tensor, adjust_gradients: Callable[[], None] | None = None) -> Tensor:
        """One optimizer step on `loss`, with Lightning's automatic optimization off; returns `loss`.

        `adjust_gradients()` runs between the backward pass and the step (a mask, a clip).
        """
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        if adjust_gradients is not None:
            adjust_gradients()
        optimizer.step()
        return loss


#: A stage name that leaves its part of the forget set alone (RUM's `none`).
NO_STAGE = "none"


def stage_method(owner: str, name: str, args: Mapping[str, object]) -> GradientMethod | None:
    """The registered method `name` built from `args` over its defaults, as a stage of `owner` (`NO_STAGE`: None).

    A stage sees the request's mixed batches with only its own part's forget samples in them, so it must train by
    gradient on retain or mixed batches; anything else is a ValueError.
    """
    if name == NO_STAGE:
        return None
    cls = METHODS.get(name)
    if not issubclass(cls, GradientMethod) or cls.batch_mode not in (BatchMode.RETAIN, BatchMode.MIXED):
        raise ValueError(
            f"{owner} stage {name!r} must train by gradient on retain or mixed batches (e.g. finetune, salun)"
        )
    check_method_arguments(name, cls, args)
    return cls(**method_arguments(cls, args))


class StagedMethod(FitMethod):
    """A method that serves a request by registered gradient methods in turn, each on its own part of the forget set (RUM).

    `stages` holds a `stage_method` per part (None: the part is left alone) and `subsets` (set by the subclass's
    `prepare`) each part's forget indices, in order. The request's batches are mixed forget ∪ retain, built once; stage
    k sees only part k's forget samples in them, starting from the model stage k − 1 left. A stage's own `prepare`
    runs inside `unlearn`, after the previous stage, so it is timed in rte_s, not prepare_s.
    """

    batch_mode = BatchMode.MIXED

    def __init__(self):
        super().__init__()
        self.stages: tuple[GradientMethod | None, ...] = ()
        self.subsets: list[np.ndarray] = []
        self.current: GradientMethod | None = None
        self.subset = torch.zeros(0, dtype=torch.long)

    def code_parts(self) -> tuple[type, ...]:
        """The stages' classes (and theirs), looked up by name (`stage_method`)."""
        return tuple(part for stage in self.stages if stage is not None for part in (type(stage), *stage.code_parts()))

    def attach(self, model: nn.Module, num_classes: int) -> StagedMethod:
        for stage in self.stages:
            if stage is not None:
                stage.attach(model, num_classes)
        return super().attach(model, num_classes)

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.request, self.data = request, data

    def unlearn(self, fit: Callable[[int], None]) -> None:
        for subset, stage in zip(self.subsets, self.stages, strict=True):
            if stage is None or not len(subset):
                continue
            self.current, self.subset = stage.to(self.device), torch.as_tensor(subset)
            stage.prepare(replace(self.request, forget=subset), NarrowedView(self.data, subset))
            fit(stage.optim.epochs)
        self.current = None

    def on_train_start(self) -> None:
        super().on_train_start()
        self.current.trainer = self.trainer

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        return self.current.loss({**batch, "forget": samples_in(batch["forget"], self.subset)})

    def after_step(self) -> None:
        self.current.after_step()

    def on_before_optimizer_step(self, optimizer) -> None:
        self.current.on_before_optimizer_step(optimizer)

    def configure_optimizers(self):
        return self.current.configure_optimizers()


def method_arguments(cls: type, *layers: Mapping[str, object]) -> dict:
    """`cls`'s keyword arguments from nested mappings (tuned values, then those given: a later layer wins).

    A group (`optim`, a mapping of its fields or the dataclass itself) is merged field by field over the
    class's own group default: `{"optim": {"lr": 0.1}}` gives SalUn `optim=SGDSettings(lr=0.1, ...)` with
    SalUn's other settings. Any other argument passes through.
    """
    defaults = groups(cls)
    arguments, grouped = {}, {}
    for layer in layers:
        for name, value in layer.items():
            if name in defaults and (isinstance(value, Mapping) or is_dataclass(value)):
                grouped.setdefault(name, {}).update(asdict(value) if is_dataclass(value) else value)
            else:
                arguments[name] = value
    return arguments | {group: replace(defaults[group], **values) for group, values in grouped.items()}


def group_settings(cls: type) -> dict[str, list[str]]:
    """The fields of each of `cls`'s argument groups: {"optim": ["lr", "epochs", ...]}."""
    return {group: [field.name for field in fields(default)] for group, default in groups(cls).items()}


def check_method_arguments(method: str, cls: type, arguments: Mapping[str, object]) -> None:
    """ConfigError, one line naming the fix, for an argument `cls` does not take (as a user spelled it, nested).

    A group's field given at the method level (`lr`, the spelling before the SGD settings were a group)
    is refused with the group's spelling (`--salun.optim.lr`).
    """
    accepted = inspect.signature(cls).parameters
    check_group_spelling(method, group_settings(cls), arguments)
    for group, default in groups(cls).items():
        settings = [field.name for field in fields(default)]
        given = arguments.get(group)
        check_group_mapping(method, group, settings, given)
        if given is None:
            continue
        unknown = sorted(set(asdict(given) if is_dataclass(given) else given) - set(settings))
        if unknown:
            raise ConfigError(
                f"{group} of method {method!r} has no setting(s) {', '.join(unknown)}; its settings are: "
                f"{', '.join(settings)}"
            )
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        raise ConfigError(
            f"method {method!r} has no argument(s) {', '.join(unknown)}; its arguments are: {', '.join(accepted)}"
        )


def refuse_unread_settings(method: str, cls: type, arguments: Mapping[str, object]) -> None:
    """An optimizer setting the method's optimizer does not read (`unread_settings`: Adam's `momentum`), given at
    another value than its default, is refused: the run would otherwise be named after a value it never used. At
    its default it is accepted, as a replayed run's record spells every setting out. Judged after the settings'
    ranges (`RunConfig.validate`), so that a value out of range gets the message the early check gives it."""
    given = arguments.get("optim")
    given = asdict(given) if is_dataclass(given) else given or {}
    default = groups(cls).get("optim")
    for name in getattr(cls, "unread_settings", ()):
        if name in given and given[name] != getattr(default, name):
            raise ConfigError(
                f"method {method!r} trains with {cls.optimizer_name}, which does not read optim.{name}; leave it out"
            )


class WeightEdit(UnlearningMethod):
    """A method that edits the weights once per request from statistics of the data, with no optimizer.

    It takes no optimizer settings, only `batch_size` (of the loaders it reads). `prepare` keeps the
    request and its view for `unlearn` to read.
    """

    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.request: UnlearningRequest | None = None
        self.data: StreamView | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.request, self.data = request, data

    def batches(self, which: str, indices=None) -> Iterator[Batch]:
        """The request's `which` set (or its `indices`) in unshuffled batches of `batch_size`, on the model's device."""
        loader = self.data.loader(which, batch_size=self.batch_size, indices=indices)
        return on_device(loader, next(self.model.parameters()).device)


class ClipsGradientNorm:
    """Mixin: the gradient norm is clipped at `hparams.clip` before every optimizer step (CF-k, EU-k, MUNBa).

    Lightning calls `configure_gradient_clipping` under automatic optimization; a manual-optimization
    method passes `clip_gradient_norm` to `manual_step`.
    """

    def clip_gradient_norm(self, optimizer=None) -> None:
        optimizer = optimizer or self.optimizers()
        self.clip_gradients(optimizer, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        self.clip_gradient_norm(optimizer)


class AdamOptimizer:
    """Mixin for a `GradientMethod` whose reference trains with Adam over every parameter: `momentum` is not read, and
    is refused when given (`refuse_unread_settings`)."""

    optimizer_name: ClassVar[str] = "Adam"
    unread_settings: ClassVar[tuple[str, ...]] = ("momentum",)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.optim.lr, weight_decay=self.optim.weight_decay)


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """`model` in eval mode inside the block (BN reads its running statistics), its own mode after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def one_of(name: str, value, choices: Collection):
    """`value` (`choices[value]` where `choices` is a mapping) if it is one of `choices`, else a ValueError naming them.

    The command line checks a `Literal` argument already; this checks it for a method built in code.
    """
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return choices[value] if isinstance(choices, Mapping) else value


def batches_in(samples: int, batch_size: int) -> int:
    """How many batches of `batch_size` hold `samples` (the last one may be short)."""
    return -(-samples // batch_size)


def samples_in(batch: Batch, indices: Tensor) -> Batch:
    """The samples of `batch` whose index is one of `indices` (a subset a method trains on: Bad Teacher, RUM)."""
    keep = torch.isin(batch.idx, indices.to(batch.idx.device))
    return Batch(batch.x[keep], batch.y[keep], batch.idx[keep])


def random_labels(labels: Tensor, num_classes: int, exclude_true: bool) -> Tensor:
    """Uniform random labels; with `exclude_true`, uniform over the classes other than the true one."""
    if not exclude_true:
        return torch.randint(0, num_classes, labels.shape, device=labels.device)
    offset = torch.randint(1, num_classes, labels.shape, device=labels.device)
    return (labels + offset) % num_classes
