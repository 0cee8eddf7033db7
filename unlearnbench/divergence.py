"""Divergence: a request whose loss or weights become NaN/inf is stopped and recorded, never scored.

GA with a large step, or any method pushed too far, can blow up. Scoring a NaN model would write
meaningless numbers (or crash the attack), so the run stops at that request, records it as
diverged in `metrics.jsonl` and `summary.json`, and the leaderboard shows it as such.
"""

from __future__ import annotations

import math

from lightning.pytorch.callbacks import Callback

from unlearnbench.step_loss import step_loss


class DegenerateModelError(Exception):
    """Raised by a method that cannot serve a request because the model has degenerated before it: statistics the
    method needs are no longer finite (SCAR's class covariances when every feature of a collapsed model is
    constant). The request is recorded as diverged, as a non-finite loss is, and the run stops there."""


class DivergenceMonitor(Callback):
    """Stops the fit at the first non-finite training loss."""

    def __init__(self) -> None:
        self.diverged = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = step_loss(outputs)
        if loss is not None and not math.isfinite(float(loss)):
            self.diverged = True
            trainer.should_stop = True
