"""Walks the T requests of one (method, stream, seed) run; resumable after a crash at any point.

For t = 1..T: select the request, seed from (seed, t), `prepare`, fit with a fresh Lightning
Trainer, evaluate the method, evaluate the oracle, persist. Every method goes through the same
calls: the runner has no per-method branch. Because each request is seeded from (seed, t) and the
method's state after each request is checkpointed, a resumed run ends with the same numbers as an
uninterrupted one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import nn

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.console import Reporter
from unlearnbench.evaluation.evaluator import EvalLogits, compute_logits
from unlearnbench.evaluation.scoring import avg_gap, request_scores, stream_summary
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.registry import DATASETS, METHODS
from unlearnbench.rundir import RunDirectory
from unlearnbench.store import ModelSpec, ModelStore
from unlearnbench.streams.base import Request, RequestStream, StreamError
from unlearnbench.training import Recipe, build_model, train_from_scratch

for _name in ("lightning", "lightning.pytorch", "lightning.fabric"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def derived_seed(*parts: int) -> int:
    return int(np.random.default_rng(list(parts)).integers(2**31))


def trainable_vector(model: nn.Module) -> torch.Tensor:
    """Trainable parameters flattened (BN running statistics are buffers, so never included)."""
    return torch.cat([p.detach().flatten().float().cpu() for p in model.parameters() if p.requires_grad])


@dataclass
class RunResult:
    run_dir: Path
    rows: list[dict]
    summary: dict
    already_complete: bool


class Runner:
    """Builds everything for a run without writing anything (so bad input fails clean), then runs it."""

    def __init__(self, config: RunConfig, reporter: Reporter | None = None):
        config.validate()
        self.config = config
        self.reporter = reporter or Reporter(quiet=True)
        self.dataset = DATASETS.get(config.dataset)()
        try:
            self.stream = RequestStream(self.dataset, config.stream, config.requests, config.size, config.seed)
        except StreamError as error:
            raise ConfigError(str(error)) from error
        try:
            self.method: UnlearningMethod = METHODS.get(config.method)(**config.method_args)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"invalid arguments for method {config.method!r}: {error}") from error
        self.recipe = replace(Recipe.for_setting(config.dataset, config.arch), **config.recipe)
        self.identity = config.identity(dict(self.method.hparams), self.recipe.as_dict(), self.stream.size)
        self.run_dir = RunDirectory(config.out / config.run_name(self.identity))
        self.store = ModelStore(config.store_dir)
        use_cuda = config.hardware.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        self.eval_device = torch.device("cuda" if use_cuda else "cpu")
        self.train_labels = self.dataset.train.labels.numpy()
        self.test_labels = self.dataset.test.labels.numpy()

    def trainer(self, epochs: int, label: str) -> L.Trainer:
        hardware = self.config.hardware
        return L.Trainer(
            max_epochs=epochs,
            accelerator=hardware.accelerator,
            devices=hardware.devices,
            strategy=hardware.strategy,
            num_nodes=hardware.num_nodes,
            precision=hardware.precision,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
            callbacks=[self.reporter.fit_callback(label)],
        )

    def trained_model(self, excluded: np.ndarray, label: str) -> nn.Module:
        """The model trained from scratch on train minus `excluded`, from the store or trained now."""
        spec = ModelSpec(
            self.config.dataset,
            self.config.arch,
            self.recipe.as_dict(),
            self.config.seed,
            tuple(excluded.tolist()),
        )
        keep = np.setdiff1d(np.arange(len(self.train_labels)), excluded)

        def train() -> dict[str, torch.Tensor]:
            seed = derived_seed(self.config.seed, 0)
            make_trainer = partial(self.trainer, label=label)
            return train_from_scratch(
                self.dataset, self.config.arch, self.recipe, keep, seed, make_trainer
            ).state_dict()

        model = build_model(self.config.arch, self.dataset)
        model.load_state_dict(self.store.get_or_train(spec, train))
        return model.eval()

    def logits(self, model: nn.Module) -> EvalLogits:
        return compute_logits(model.to(self.eval_device), self.dataset)

    def score(self, logits: EvalLogits, request: Request) -> dict:
        return request_scores(
            logits,
            self.train_labels,
            self.test_labels,
            request,
            self.stream.requests,
            self.dataset.num_classes,
            mia_seed=derived_seed(self.config.seed, request.t, 1),
        )

    def serve(self, request: Request) -> dict:
        """Prepare and unlearn request t; returns the timings and update norm."""
        method = self.method
        L.seed_everything(derived_seed(self.config.seed, request.t), verbose=False)
        before = trainable_vector(method.model)
        start = time.perf_counter()
        method.prepare(request.public(), self.stream.view())
        prepare_s = time.perf_counter() - start
        self.stream.configure_batches(method.batch_mode, method.hparams.batch_size)

        def fit(epochs: int) -> None:
            self.trainer(epochs, f"unlearning {request.t}/{self.stream.num_requests}").fit(
                method, datamodule=self.stream
            )

        _synchronize()
        start = time.perf_counter()
        method.unlearn(fit)
        _synchronize()
        rte_s = time.perf_counter() - start
        update_norm = float(torch.linalg.vector_norm(trainable_vector(method.model) - before))
        return {"rte_s": rte_s, "prepare_s": prepare_s, "update_norm": update_norm}

    def run(self) -> RunResult:
        config, run_dir = self.config, self.run_dir
        run_dir.initialize(self.identity, self.stream.manifest(), self.train_labels, self.test_labels)
        rows = run_dir.rows()
        if len(rows) == config.requests:
            summary = stream_summary(rows)
            if not (run_dir.path / "summary.json").exists():
                run_dir.write_summary(summary)
            return RunResult(run_dir.path, rows, summary, already_complete=True)
        model = self.trained_model(np.array([], dtype=np.int64), "pretraining")
        self.method.attach(model, self.dataset.num_classes)
        if rows:
            self.method.load_state_dict(run_dir.load_state(len(rows)))
            self.reporter.message(f"resuming at request {len(rows) + 1}/{config.requests}")
        for t in range(len(rows) + 1, config.requests + 1):
            request = self.stream.select(t)
            timings = self.serve(request)
            method_logits = self.logits(self.method)
            method_scores = self.score(method_logits, request) | timings
            row = {"t": t, "forget_classes": request.forget_classes, "method": method_scores, "oracle": None}
            oracle_logits = None
            if config.oracle == "retrain":
                oracle = self.trained_model(request.forgotten, f"oracle {t}/{config.requests} (retraining)")
                oracle_logits = self.logits(oracle)
                row["oracle"] = self.score(oracle_logits, request)
                method_scores["gap"] = avg_gap(method_scores, row["oracle"])
            run_dir.save_state(t, self.method.state_dict())
            if config.save_logits:
                run_dir.save_logits(t, vars(method_logits), vars(oracle_logits) if oracle_logits else None)
            run_dir.append_row(row)
            run_dir.drop_states_before(t)
            rows.append(row)
            self.reporter.request(row, config.requests)
        summary = stream_summary(rows)
        run_dir.write_summary(summary)
        return RunResult(run_dir.path, rows, summary, already_complete=False)


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
