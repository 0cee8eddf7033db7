"""Continual LOFT: one subspace that keeps hiding every forget set so far, warm-started request to request."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from unlearnbench.methods.base import one_of
from unlearnbench.methods.loft import LOFT
from unlearnbench.methods.subspace import Moments, history_from_state, history_state, history_terms
from unlearnbench.ranges import NON_NEGATIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Categorical, Float, space


@METHODS.register("continual_loft")
class ContinualLOFT(LOFT):
    """Continual LOFT: LOFT whose forget term covers F_1..F_t, U warm-started from U_{t−1} (LOFT, NeurIPS 2026).

    The backbone never changes, so history costs covariances only: the moments (n, mean, Σ) of
    each F_s are kept in the method state, no raw data is revisited. At request t:
    - `history="pooled"`: J = (tr(UᵀΣ_{F_1∪..∪F_t}U)/tr Σ_{F_1∪..∪F_t})² + J_rm², with the exact
      pooled covariance of the union (within-set scatter plus between-set mean shifts);
    - `history="weighted"`: J = J_f(F_t)² + λ_hist/(t−1) Σ_{s<t} J_f(F_s)² + J_rm², with
      J_f(F) = tr(UᵀΣ_FU)/tr Σ_F;
    J_rm = tr(Σ_r − UUᵀΣ_rUUᵀ)/tr Σ_r on the current retain set. s is set at request 1 (by
    `variance`, or `s`) and kept, since U_t starts from U_{t−1}. The paper reports a 4-round
    continual experiment without a public driver; this objective is ours, and so are its defaults
    (PCA start, `stabilize=10`, lr 0.05, 200 steps: LOFT's named options, see there).

    Args:
        history: how earlier forget sets enter J: `pooled` (covariance of their union) or `weighted` (one term each).
        lambda_hist: weight of the earlier forget sets' terms (`history=weighted`).
    """

    search_space = space(
        LOFT.search_space, history=Categorical(("pooled", "weighted")), lambda_hist=Float(0.1, 10.0, log=True)
    )
    valid_ranges = ranges(lambda_hist=NON_NEGATIVE)

    def __init__(
        self,
        history: Literal["pooled", "weighted"] = "pooled",
        lambda_hist: float = 1.0,
        s: int | None = None,
        variance: float = 0.95,
        steps: int = 200,
        lr: float = 0.05,
        init: Literal["random", "pca"] = "pca",
        stabilize: int | None = 10,
        fuse: bool = False,
        batch_size: int = 512,
    ):
        one_of("history", history, ("pooled", "weighted"))
        super().__init__(
            s=s, variance=variance, steps=steps, lr=lr, init=init, stabilize=stabilize, fuse=fuse, batch_size=batch_size
        )
        self.past: dict[int, Moments] = {}

    def forget_terms(self, t: int, forget: Moments) -> list[tuple[float, Tensor]]:
        self.past = {s: m for s, m in self.past.items() if s < t} | {t: forget}
        earlier = [self.past[s] for s in sorted(self.past) if s < t]
        return history_terms(earlier, forget, self.hparams.history, self.hparams.lambda_hist)

    def start(self) -> Tensor:
        return super().start() if self.U is None else self.U.to(self.retain_cov)

    def get_extra_state(self) -> dict:
        return super().get_extra_state() | history_state(self.past, self.model.projection.shape[0])

    def set_extra_state(self, state: dict) -> None:
        super().set_extra_state(state)
        self.past = history_from_state(state)
