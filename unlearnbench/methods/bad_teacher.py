"""Bad Teacher: imitate a random network on forget and the original model on retain."""

from __future__ import annotations

import torch
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import AdamOptimizer, GradientMethod, SGDSettings, samples_in
from unlearnbench.methods.distill import Teacher, distill_kl, reinitialized
from unlearnbench.ranges import FRACTION, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, Int, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


@METHODS.register("bad_teacher")
class BadTeacher(AdamOptimizer, GradientMethod):
    """Bad Teacher: KL to an incompetent teacher on forget, to a competent one on retain (Chundawat et al., AAAI 2023).

    "Can Bad Teaching Induce Forgetting?". The competent teacher is a frozen copy of the model before the request; the
    incompetent one a freshly initialized model of the same arch (new each request). Compared against
    vikram2000b/bad-teaching-unlearning at f1aa988 (2023-10-11), `unlearn.py` (`blindspot_unlearner`, copied by SSD's
    code) and `CIFARSuper20_Rocket_Unlearn.ipynb`: a random 30% of retain (`retain_fraction`) is mixed with the forget
    set in shuffled batches of 256, KL temperature 1, Adam lr 1e-4, 1 epoch. Where we differ: the 30% sample is drawn
    once per request and filtered out of batches of forget ∪ retain, so batches hold about a third of 256 samples and
    an epoch takes about 3× as many steps; KL is the batch mean (the reference's `F.kl_div` default averages over
    classes too, a constant factor Adam mostly absorbs). `momentum` is unused (Adam).

    Args:
        retain_fraction: share of the retain set drawn once per request and mixed with the forget set.
        temperature: KL temperature of both teachers.
    """

    batch_mode = BatchMode.MIXED
    search_space = space(
        optim={"lr": Float(1e-5, 1e-2, log=True), "epochs": Int(1, 5)},
        retain_fraction=Float(0.05, 1.0),
        temperature=Float(0.5, 8.0, log=True),
    )
    valid_ranges = ranges(retain_fraction=FRACTION, temperature=POSITIVE)

    def __init__(
        self,
        retain_fraction: float = 0.3,
        temperature: float = 1.0,
        optim: SGDSettings = SGDSettings(lr=1e-4, epochs=1, weight_decay=0.0),
    ):
        super().__init__(optim=optim)
        self.competent: Teacher | None = None
        self.incompetent: Teacher | None = None
        self.retain_sample = torch.zeros(0, dtype=torch.long)

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.competent, self.incompetent = Teacher(self.model), Teacher(reinitialized(self.model))
        keep = int(self.hparams.retain_fraction * len(request.retain))
        self.retain_sample = torch.as_tensor(request.retain)[torch.randperm(len(request.retain))[:keep]]

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        forget, retain = batch["forget"], samples_in(batch["retain"], self.retain_sample)
        x = torch.cat([forget.x, retain.x])
        if not len(x):  # a last mixed batch of unsampled retain samples only: nothing to learn
            return torch.zeros((), device=x.device, requires_grad=True)
        target = torch.cat([self.incompetent(forget.x), self.competent(retain.x)])
        return distill_kl(self(x), target, self.hparams.temperature, t_squared=False)
