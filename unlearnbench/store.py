"""Content-addressed model store for pretrained models and oracles (docs/architecture.md).

An entry is keyed by a hash of (dataset and its fingerprint, arch and its arguments, training
recipe, seed, sorted excluded indices),
so every method on the same stream and seed shares the same oracles and a second run trains
none. Writes are atomic (weights first, then the metadata that names their key and sha256); a
reader verifies both, so the files of another entry copied over this one's are not taken for it,
and loads with `weights_only=True`, so a truncated, edited, misplaced or malicious file (or
metadata that is not a JSON object of UTF-8 text), an entry whose tensors are not the shapes of the
model it is loaded into (an arch changed under the same name) and a folder in an entry's place are
retrained, with one warning line, never trusted or fatal. A model with a
non-finite weight is never stored: training that diverged is an error naming the recipe. A
per-entry file lock makes parallel processes train each model once.

The store also caches the scores of single-shot counterfactuals (`single_shot/<key>.json`, see
`Runner.single_shot`): they depend only on the method, its hyperparameters, the pretrained model,
the request and its seed, so a rerun or a longer stream of the same setting reads them back. Beside each
pretrained model it keeps the train set's memorization estimate (`memorization/<its key>.json`, see
`streams.memorized`), computed once per pretrained model for the memorization-stratified streams.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import pickle
import shutil
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock

from unlearnbench.errors import ConfigError
from unlearnbench.io import write_atomic, write_json_atomic

#: A state dict's tensor names -> shapes: what an entry must hold to load into a model.
Shapes = dict[str, tuple[int, ...]]
_log = logging.getLogger(__name__)


class TrainingDivergedError(ConfigError):
    """Training from scratch gave non-finite weights: the recipe, not the run, must change."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ModelSpec:
    """Everything a from-scratch training run depends on.

    `data` is the dataset's fingerprint (`data.base.data_fingerprint`: labels, a content sample or
    the file list, and the dataset arguments): two subsets, or two folders under one dataset name,
    never share a model. `arch_args` are the arch's arguments (`--arch.width`).
    """

    dataset: str
    arch: str
    recipe: dict
    seed: int
    excluded: tuple[int, ...] = field(default=())
    data: str = ""
    arch_args: dict = field(default_factory=dict)
    #: trained in a group by one batched fit (`training.train_together`): equal to the lone fit up to float
    #: rounding, not bit for bit, so stored apart from it
    batched: bool = False

    def key(self) -> str:
        excluded = sha256_bytes(np.asarray(sorted(self.excluded), dtype=np.int64).tobytes())
        payload = {
            "dataset": self.dataset,
            "data": self.data,
            "arch": self.arch,
            "arch_args": self.arch_args,
            "recipe": self.recipe,
            "seed": self.seed,
            "excluded": excluded,
        }
        if self.batched:  # absent otherwise: the keys of lone fits are those stored before batched fits existed
            payload["batched"] = True
        return sha256_bytes(json.dumps(payload, sort_keys=True).encode())[:24]


class ModelStore:
    """A folder of `<key>.pt` weights and `<key>.json` metadata; `trained` counts models trained here."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.trained = 0

    def _paths(self, key: str) -> tuple[Path, Path, Path]:
        return self.root / f"{key}.pt", self.root / f"{key}.json", self.root / f"{key}.lock"

    def load(self, spec: ModelSpec, shapes: Shapes | None = None) -> dict[str, torch.Tensor] | None:
        """The entry's state dict if present, written for this key, its sha256 matching, its weights finite and, with
        `shapes`, its tensors those of the model it is loaded into; None otherwise (the caller retrains it)."""
        return self._read(spec, shapes)[0]

    def _read(self, spec: ModelSpec, shapes: Shapes | None) -> tuple[dict[str, torch.Tensor] | None, str | None]:
        """`load`'s state, or None and why the entry there is unusable (None when there is no entry)."""
        key = spec.key()
        weights, meta, _ = self._paths(key)
        if not (weights.exists() and meta.exists()):
            return None, None
        try:
            metadata = json.loads(meta.read_bytes().decode("utf-8"))
            data = weights.read_bytes()
        except OSError as error:  # a folder in an entry's place, an unreadable file
            return None, f"unreadable ({error.strerror})"
        except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON
            return None, "its metadata is not JSON"
        if not isinstance(metadata, dict) or metadata.get("key") != key:
            return None, "its metadata names another entry"  # damaged, from before keys were recorded, or copied
        if sha256_bytes(data) != metadata.get("sha256"):
            return None, "its weights do not match their sha256"
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError):
            # Not plain tensors (e.g. a pickle that would run code): never trusted, rebuilt instead.
            return None, "its weights are not a weights-only checkpoint"
        if not (isinstance(state, dict) and finite_state(state)):
            return None, "its weights are not a finite state dict"
        if shapes is not None and _shapes(state) != shapes:
            return None, "its tensors are not the shapes of the model (the arch changed?)"
        return state, None

    def _scores_path(self, key: str) -> Path:
        return self.root / "single_shot" / f"{key}.json"

    def load_scores(self, key: str) -> dict | None:
        """Cached scores written under `key`; None when absent, damaged or written for another key."""
        try:
            data = json.loads(self._scores_path(key).read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("scores"), dict):
            return None
        return data["scores"]

    def save_scores(self, key: str, scores: dict) -> None:
        write_json_atomic(self._scores_path(key), {"key": key, "scores": scores})

    def _memorization_path(self, pretrained: ModelSpec) -> Path:
        return self.root / "memorization" / f"{pretrained.key()}.json"

    def load_memorization(self, pretrained: ModelSpec, proxy: str, num_train: int) -> np.ndarray | None:
        """The memorization estimate `proxy` stored beside the `pretrained` model, one number per train sample; None
        when absent, damaged, or written for another model, estimate or train set (the caller computes it again)."""
        try:
            data = json.loads(self._memorization_path(pretrained).read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != pretrained.key() or data.get("proxy") != proxy:
            return None
        scores = data.get("scores")
        if not (isinstance(scores, list) and len(scores) == num_train and all(isinstance(v, float) for v in scores)):
            return None
        return np.asarray(scores, dtype=np.float64)

    def save_memorization(self, pretrained: ModelSpec, proxy: str, scores: np.ndarray) -> None:
        write_json_atomic(
            self._memorization_path(pretrained),
            {"key": pretrained.key(), "proxy": proxy, "scores": np.asarray(scores, dtype=np.float64).tolist()},
        )

    def get_or_train(
        self, spec: ModelSpec, train: Callable[[], dict[str, torch.Tensor]], shapes: Shapes | None = None
    ) -> dict[str, torch.Tensor]:
        """Load the entry, or train it (once across processes) and store it atomically. An entry there that cannot
        be used (`load`; `shapes`: the tensors of the model it is loaded into) is retrained in its place, with one
        warning line naming it and why."""
        return self.get_or_train_together([spec], lambda missing: [train()], shapes)[0]

    def get_or_train_together(
        self,
        specs: list[ModelSpec],
        train: Callable[[list[ModelSpec]], list[dict[str, torch.Tensor]]],
        shapes: Shapes | None = None,
    ) -> list[dict[str, torch.Tensor]]:
        """Load the entries, the missing or unusable ones trained by one call `train(missing specs)` (once across
        processes: under their locks, taken in key order) and stored atomically, each as `get_or_train` stores one."""
        states = [self.load(spec, shapes) for spec in specs]
        missing = [spec for spec, state in zip(specs, states, strict=True) if state is None]
        if not missing:
            return states
        self.root.mkdir(parents=True, exist_ok=True)
        with ExitStack() as locks:
            for spec in sorted(missing, key=ModelSpec.key):
                locks.enter_context(FileLock(self._paths(spec.key())[2]))
            read = {spec.key(): self._read(spec, shapes) for spec in missing}  # another process may have trained it
            still = [spec for spec in missing if read[spec.key()][0] is None]
            for spec in still:
                self._clear_unusable(spec, read[spec.key()][1])
            trained = dict(zip([spec.key() for spec in still], train(still) if still else [], strict=True))
            for spec in still:
                trained[spec.key()] = self._save(spec, trained[spec.key()])
            return [state if state is not None else trained.get(spec.key()) or read[spec.key()][0]
                    for spec, state in zip(specs, states, strict=True)]  # fmt: skip

    def _clear_unusable(self, spec: ModelSpec, problem: str | None) -> None:
        """Make room for retraining an entry that cannot be used: one warning line naming it and why, and a folder
        in a file's place (the store's name, so the store's to replace) removed."""
        weights, meta, _ = self._paths(spec.key())
        if problem is not None:
            _log.warning(f"model store entry {weights} is unusable: {problem}; retraining it")
        for path in (weights, meta):
            if path.is_dir():
                shutil.rmtree(path)

    def _save(self, spec: ModelSpec, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Store a freshly trained entry (its key's lock held); refused, with the fix, when it diverged."""
        weights, meta, _ = self._paths(spec.key())
        state = {name: tensor.detach().cpu() for name, tensor in state.items()}
        if not finite_state(state):
            what = "the pretrained model" if not spec.excluded else f"an oracle ({len(spec.excluded)} samples left out)"
            raise TrainingDivergedError(
                f"training {what} of {spec.dataset}/{spec.arch} diverged (non-finite weights) with recipe "
                f"{json.dumps(spec.recipe)}; nothing was stored: lower its lr, e.g. --recipe '{{\"lr\": ...}}'"
            )
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        write_atomic(weights, lambda f: f.write(data))
        spec_meta = {
            "dataset": spec.dataset,
            "data": spec.data,
            "arch": spec.arch,
            "arch_args": spec.arch_args,
            "recipe": spec.recipe,
            "seed": spec.seed,
        }
        write_json_atomic(
            meta, {"key": spec.key(), "sha256": sha256_bytes(data), "num_excluded": len(spec.excluded), **spec_meta}
        )
        self.trained += 1
        return state


def _shapes(state: dict) -> Shapes:
    return {name: tuple(tensor.shape) for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}


def model_shapes(model: torch.nn.Module) -> Shapes:
    """The tensor shapes an entry must have to load into `model` (`get_or_train`'s `shapes`)."""
    return _shapes(model.state_dict())


def finite_state(state: dict) -> bool:
    """Every floating-point tensor of a state dict holds finite numbers only."""
    return all(
        bool(torch.isfinite(tensor).all())
        for tensor in state.values()
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point()
    )
