"""Memorization-stratified random streams: forget sets drawn from the most, the least, or a mix of the most and the
least memorized train samples.

The memorization estimate is Feldman & Zhang's ("What Neural Networks Memorize and Why", NeurIPS 2020, eq. 1 and
its subsampled estimator; reference code: google-research/heldout-influence-estimation,
`mnist-example/mnist_infl_mem.py`, `estimate_infl_mem`): mem(i) = the expected correctness on (x_i, y_i) of a
model trained on a subset holding i, minus that of a model trained on a subset without it. Their estimator trains
2000 models on random 70% subsets; ours, cheap enough to run once per pretrained model on a CPU, departs twice:

- `HALF_PAIRS` = 2 pairs of complementary halves (4 fits on half the train set, with the pretraining recipe), so
  every sample is held in by exactly 2 models and held out by exactly 2;
- correctness is the true-label softmax probability p(y_i | x_i), not the 0/1 hit: with 2 models a side the 0/1
  average takes 5 values and leaves most samples tied, the probability orders them.

The estimate is computed by the runner (`Runner.memorization`) before the stream is built and stored in the model
store beside the pretrained model, keyed by it (`ModelStore.load_memorization`), so the manifest stays a pure
function of its inputs: the dataset, the kind, T, the size, the seed and the stored estimate.

How the forget sets are drawn: with n = size x train samples per request, `memorized_most` pools the T x n most
memorized train samples (ties: lower index first), shuffles the pool with the stream seed and cuts it into T
requests; `memorized_least` the same with the T x n least memorized; `memorized_mixed` gives each request n // 2
samples from the pool of the most memorized and n − n // 2 from that of the least (RUM's `mix` forget set, Zhao et
al., NeurIPS 2024, "What makes unlearning hard and what to do about it", takes a third from each of its high, medium
and low groups; ours has no medium part, so that the strata stay as far apart as the kinds are).
"""

from __future__ import annotations

import numpy as np

from unlearnbench.registry import STREAMS
from unlearnbench.streams.kinds import ForgetSet, StreamError
from unlearnbench.streams.random import RandomSamples

#: Pairs of complementary half-models the estimate averages over (2 x HALF_PAIRS fits on half the train set each).
HALF_PAIRS = 2
#: The estimate's name and version, stored with it: a changed definition is another estimate, never the old one's.
PROXY = "feldman_zhang_halves_v1"


def held_out_halves(num_train: int, seed: int) -> list[np.ndarray]:
    """The train indices each half-model leaves out (sorted): pair k cuts a permutation drawn from (seed, k) in two,
    its first model leaves out the first half, its second the other half."""
    halves = []
    for pair in range(HALF_PAIRS):
        order = np.random.default_rng([seed, pair]).permutation(num_train)
        cut = num_train // 2
        halves += [np.sort(order[:cut]), np.sort(order[cut:])]
    return halves


def memorization_estimate(true_label_probability: np.ndarray, held_out: list[np.ndarray]) -> np.ndarray:
    """mem(i) = mean p(y_i | x_i) over the models trained on i − mean over the models that left i out.

    `true_label_probability[k, i]`: model k's probability of sample i's label; `held_out[k]`: the train indices
    model k left out.
    """
    trained_on = np.ones(true_label_probability.shape, dtype=bool)
    for k, left_out in enumerate(held_out):
        trained_on[k, left_out] = False
    inside = (true_label_probability * trained_on).sum(0) / trained_on.sum(0)
    outside = (true_label_probability * ~trained_on).sum(0) / (~trained_on).sum(0)
    return inside - outside


class MemorizationStratified(RandomSamples):
    """A random stream whose requests are drawn from one stratum of the memorization estimate (the base of the
    registered kinds; its sizes are the random stream's)."""

    #: the kind's `build` takes the stored memorization estimate (`memorization=`)
    reads_memorization = True
    #: most | least | mixed
    stratum = ""

    def describe_size(self, size: float) -> str:
        return f"{100 * size:g}% of train per request, {self.stratum} memorized"

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None:
        super().validate(num_train, num_classes, num_requests, size)
        if self.stratum == "mixed" and self._count(num_train, size) < 2:
            raise StreamError(
                f"memorized_mixed needs at least 2 samples per request (one of each stratum), got "
                f"{self._count(num_train, size)}; use size >= {2 / num_train:.2g}"
            )

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
        memorization: np.ndarray,
    ) -> list[ForgetSet]:
        count = self._count(len(train_labels), size)
        most = {"most": count, "least": 0, "mixed": count // 2}[self.stratum]
        scores = np.asarray(memorization, dtype=np.float64)
        most_first, least_first = np.argsort(-scores, kind="stable"), np.argsort(scores, kind="stable")
        pools = [most_first[: num_requests * most], least_first[: num_requests * (count - most)]]
        parts = [np.array_split(rng.permutation(pool), num_requests) for pool in pools]
        return [ForgetSet(np.sort(np.concatenate([part[t] for part in parts]))) for t in range(num_requests)]


@STREAMS.register("memorized_most")
class MostMemorized(MemorizationStratified):
    """Random requests from the most memorized train samples (size, default 0.01; a leave-out estimate, see docs)."""

    stratum = "most"


@STREAMS.register("memorized_least")
class LeastMemorized(MemorizationStratified):
    """Random requests from the least memorized train samples (size, default 0.01; a leave-out estimate, see docs)."""

    stratum = "least"


@STREAMS.register("memorized_mixed")
class MixedMemorized(MemorizationStratified):
    """Random requests, half from the most and half from the least memorized train samples (size, default 0.01)."""

    stratum = "mixed"
