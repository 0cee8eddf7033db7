"""Interleaved stream: new train data arrive between deletion requests, and the model learns them before the next one.

The setting of continual learning with unlearning (CLArena's continual-unlearning pipeline, where tasks are learned
one after another and unlearning requests come between them; Hu, Duan and Zhang, "The Forgetting-Retention Dilemma:
Certified Unlearning Theory in Continual Learning", PMLR 306, 2026), on one dataset: a part of the train set is held
out of pretraining and released in chunks over the stream.

- `HELD_OUT` = half of the train set (drawn with the stream seed) is held out of pretraining and cut into T − 1 equal
  chunks; chunk k is released after request k, so request t finds the model of age t − 1 (t − 1 chunks learned).
- Request t forgets `size` x train samples drawn, as the random stream draws them, from the part the pretrained model
  learned (never re-drawn). Why not from the released chunks too: every forget set is then a sample of one
  population whatever the model's age, so how the gap moves with age is the model's doing, not a change in what is
  asked; and a pretraining sample is one the model has learned for the longest by then, whose trace each learning
  step reshapes.
- The learning step before request t (`Runner.learn`, one runner step, the same for every method) fine-tunes the
  method's current model on the chunk released since t − 1 plus as many samples replayed from request t − 1's retain
  set (experience replay: Chaudhry et al., "On Tiny Episodic Memories in Continual Learning", arXiv:1902.10486, 2019;
  Rolnick et al., NeurIPS 2019), for `LEARNING_EPOCHS` epochs of the pretraining recipe (its SGD, lr, momentum, weight
  decay and batch size, the cosine over those epochs). Without replay, fine-tuning on the chunk alone would
  catastrophically forget the rest, which a deployed model that keeps learning does not afford and which would pass
  for unlearning; a forgotten sample is never replayed.
- Request t's oracle is the model trained from scratch on everything released by t minus F_1..F_t: train minus the
  chunks not yet released minus the forgotten samples (`Request.excluded`). The pretrained model is trained on train
  minus every chunk (`RequestStream.pretraining_excluded`).
"""

from __future__ import annotations

import numpy as np

from unlearnbench.registry import STREAMS
from unlearnbench.streams.kinds import ForgetSet, StreamError
from unlearnbench.streams.random import RandomSamples

#: The share of the train set held out of pretraining and released in T − 1 chunks over the stream.
HELD_OUT = 0.5
#: Epochs of the learning step (the pretraining recipe's SGD) on a released chunk and its replayed retain samples.
LEARNING_EPOCHS = 1


@STREAMS.register("interleaved")
class Interleaved(RandomSamples):
    """Random requests (size, default 0.01) on a model that learns a new chunk of train data before each request t >= 2."""

    #: request t's model is no longer the pretrained model after t − 1 learning steps: its single-shot counterfactual
    #: (served from the pretrained model) would measure the learning, not the stream (refused: `RunConfig.validate`)
    single_shot = False
    learning_epochs = LEARNING_EPOCHS

    def describe_size(self, size: float) -> str:
        return f"{100 * size:g}% of train per request, {100 * HELD_OUT:g}% of train arriving in chunks"

    def _held_out_count(self, num_train: int) -> int:
        return round(HELD_OUT * num_train)

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None:
        if num_requests < 2:
            raise StreamError(
                f"interleaved streams learn new data between requests, so they need requests >= 2, got {num_requests}"
            )
        super().validate(num_train, num_classes, num_requests, size)
        learned = num_train - self._held_out_count(num_train)
        if num_requests * self._count(num_train, size) >= learned:
            raise StreamError(
                f"interleaved streams forget from the {learned} samples pretraining learned, so requests x size must "
                f"be below {1 - HELD_OUT:g}, got {num_requests} x {size}"
            )
        if self._held_out_count(num_train) < num_requests - 1:
            raise StreamError(f"{num_train} train samples cannot be released in {num_requests - 1} chunks")

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
    ) -> list[ForgetSet]:
        num_train = len(train_labels)
        order = rng.permutation(num_train)
        held_out, remaining = (
            order[: self._held_out_count(num_train)],
            np.sort(order[self._held_out_count(num_train) :]),
        )
        chunks = np.array_split(held_out, num_requests - 1)  # chunk k released after request k
        forget_sets = []
        for t in range(1, num_requests + 1):
            chosen = np.sort(rng.choice(remaining, self._count(num_train, size), replace=False))
            remaining = np.setdiff1d(remaining, chosen, assume_unique=True)
            unseen = np.sort(np.concatenate([np.array([], dtype=np.int64), *chunks[t - 1 :]]))
            forget_sets.append(ForgetSet(chosen, unseen=unseen))
        return forget_sets

    def learning_set(self, released: np.ndarray, retain: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The learning step's train indices: the release and as many samples of `retain` (what the model was allowed
        to keep before it), drawn without replacement by `rng` (all of it where it holds fewer)."""
        replayed = rng.choice(retain, min(len(released), len(retain)), replace=False)
        return np.union1d(released, replayed)
