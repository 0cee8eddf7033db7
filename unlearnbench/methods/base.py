"""`UnlearningMethod`: the LightningModule every unlearning method subclasses.

A method declares its hyperparameters as typed `__init__` arguments (defaults from its reference
implementation; the CLI and configs override them), picks a `BatchMode`, and implements
`loss(batch)`. It may override `prepare(request, data)` for work done once per request (a saliency
mask, a teacher copy) and `after_step()` (re-apply a mask). A method that is not a gradient loop
over data overrides `unlearn(fit)` instead. The training loop is Lightning's, never the method's,
and the runner treats every method the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import ClassVar

import lightning as L
import torch
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.errors import ConfigError
from unlearnbench.methods.gradients import on_device
from unlearnbench.ranges import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Range, ranges
from unlearnbench.search_space import Distribution
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


class ResumeStateError(ConfigError):
    """A saved method state that the method cannot take back (its code changed since it was saved)."""


class UnlearningMethod(L.LightningModule):
    """Base class: SGD with momentum over the model's trainable parameters, constant learning rate.

    Args:
        lr: learning rate of the method's optimizer (SGD unless the method says otherwise).
        epochs: passes over the request's batches (a method that takes no step ignores it).
        batch_size: samples per batch of the request's loaders.
        momentum: SGD momentum (unused by methods that use Adam or take no step).
        weight_decay: SGD weight decay (L2 penalty on the trained parameters).
    """

    batch_mode: ClassVar[BatchMode] = BatchMode.RETAIN
    #: False for methods that do not update the model by gradient steps (LOFT): guards refuse them.
    trains_by_gradient: ClassVar[bool] = True
    #: The stream kinds the method serves (None: every kind); a run on another kind is refused, as bad
    #: input, before any data is loaded (UNSIR learns noise per forgotten class: class-wise only).
    streams: ClassVar[tuple[str, ...] | None] = None
    #: What `unlearnbench tune` may vary: `__init__` argument -> a `search_space` record (Float, Int,
    #: Categorical). Every registered method declares one; the registry-wide test refuses a method without.
    search_space: ClassVar[Mapping[str, Distribution] | None] = None
    #: Valid values of the `__init__` arguments (`ranges.Range`); a subclass declares its own arguments only,
    #: its bases' ranges apply too. A run outside them is refused before any data is loaded.
    valid_ranges: ClassVar[Mapping[str, Range]] = ranges(
        lr=POSITIVE,
        epochs=AT_LEAST_ONE,
        batch_size=AT_LEAST_ONE,
        momentum=Range(0, 1, high_open=True),
        weight_decay=NON_NEGATIVE,
    )

    def __init__(
        self,
        lr: float = 0.01,
        epochs: int = 10,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model: nn.Module | None = None
        self.num_classes = 0

    def attach(self, model: nn.Module, num_classes: int) -> UnlearningMethod:
        """Give the method the model it will unlearn from (the pretrained model before request 1)."""
        self.model = model
        self.num_classes = num_classes
        return self

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        """Work done once per request before training; timed separately as `prepare_s`."""

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement loss() or override unlearn()")

    def after_step(self) -> None:
        """Called after every optimizer step."""

    def unlearn(self, fit: Callable[[int], None]) -> None:
        """Serve the current request; `fit(epochs)` runs Lightning's loop over the request's batches."""
        fit(self.hparams.epochs)

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

    def manual_step(self, loss: Tensor, adjust_gradients: Callable[[], None] | None = None) -> None:
        """One optimizer step on `loss`, for a method with `automatic_optimization = False`.

        `adjust_gradients()` runs between the backward pass and the step (a mask, a clip).
        """
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        if adjust_gradients is not None:
            adjust_gradients()
        optimizer.step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=self.hparams.lr,
            momentum=self.hparams.momentum,
            weight_decay=self.hparams.weight_decay,
        )


class WeightEdit(UnlearningMethod):
    """A method that edits the weights once per request from statistics of the data, with no optimizer.

    It takes `batch_size` (of the loaders it reads) only: the optimizer settings are dropped from
    its hyperparameters. `prepare` keeps the request and its view for `unlearn` to read.
    """

    trains_by_gradient = False

    def __init__(self, batch_size: int = 64):
        super().__init__(batch_size=batch_size)
        for unused in ("epochs", "lr", "momentum", "weight_decay"):
            self.hparams.pop(unused)
        self.request: UnlearningRequest | None = None
        self.data: StreamView | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.request, self.data = request, data

    def batches(self, which: str, indices=None) -> Iterator[Batch]:
        """The request's `which` set (or its `indices`) in unshuffled batches of `batch_size`, on the model's device."""
        loader = self.data.loader(which, batch_size=self.hparams.batch_size, indices=indices)
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
    """Mixin for a method whose reference trains with Adam over every parameter (`momentum` is unused)."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


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


def random_labels(labels: Tensor, num_classes: int, exclude_true: bool) -> Tensor:
    """Uniform random labels; with `exclude_true`, uniform over the classes other than the true one."""
    if not exclude_true:
        return torch.randint(0, num_classes, labels.shape, device=labels.device)
    offset = torch.randint(1, num_classes, labels.shape, device=labels.device)
    return (labels + offset) % num_classes
