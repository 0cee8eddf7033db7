"""Walks the T requests of one (method, stream, seed) run; resumable after a crash at any point.

For t = 1..T: on an interleaved stream, learn the train data released since t − 1 (`learn`, checkpointed); select
the request, seed from (unlearn seed, t), `prepare`, fit with a fresh Lightning
Trainer, evaluate the method, evaluate the oracle(s) (at the requests `RunConfig.oracle_at`
schedules), serve the single-shot counterfactual (where `RunConfig.single_shot_at` schedules it),
run the robustness evaluations (`RunConfig.relearn_at`, `quantize_at`), persist. Every method goes
through the same calls: the runner has no per-method branch. Because each request is seeded from
(unlearn seed, t) and the method's state after each request is checkpointed, a resumed run ends
with the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy, Strategy
from threadpoolctl import threadpool_limits
from torch import nn

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.console import Reporter
from unlearnbench.data.base import DatasetError
from unlearnbench.data.cache import DatasetCache
from unlearnbench.data.validation import validation_view
from unlearnbench.divergence import DegenerateModelError, DivergenceMonitor
from unlearnbench.evaluation.evaluator import EvalLogits, compute_logits
from unlearnbench.evaluation.geometry import GeometryRecorder, recompute_geometry
from unlearnbench.evaluation.keys import (
    GAP_ACC,
    METRIC_KEYS,
    ScoringInputs,
    gap_keys,
    user_metric_code,
    user_metrics,
)
from unlearnbench.evaluation.mia import true_label_confidence
from unlearnbench.evaluation.oracle_mia import ATTACK_KEYS, request_attack, request_phi
from unlearnbench.evaluation.privacy import RMIA_KEYS, TOW_KEYS, request_privacy
from unlearnbench.evaluation.quantization import QUANTIZED_METRICS, quantized_scores
from unlearnbench.evaluation.reference_scores import digest, reference_scores
from unlearnbench.evaluation.relearn import heldout_accuracy, relearn_curve, relearn_scores, relearn_split
from unlearnbench.evaluation.scoring import avg_gap, forward_gain, request_scores, stream_summary
from unlearnbench.evaluation.updates import parameter_update, snapshot
from unlearnbench.guards import build_guards, pack_state, unpack_state
from unlearnbench.interrupt import Interrupted, raise_if_interrupted
from unlearnbench.loggers import RunLogger, open_run_logger
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.nodes import NodeGroup
from unlearnbench.plan import RunPlan, plan_run
from unlearnbench.provenance import method_code, method_code_change, session_record
from unlearnbench.records import SINGLE_SHOT_FIELDS, RequestRecord, RunSummary, ended_diverged, is_finished
from unlearnbench.registry import METHODS, STREAMS
from unlearnbench.rundir import RunDirectory
from unlearnbench.seeds import attack_seed, derived_seed, learning_seed, relearn_seed
from unlearnbench.step_loss import StepLossLogger
from unlearnbench.store import ModelSpec, ModelStore, Shapes, model_shapes, sha256_bytes
from unlearnbench.streams.base import Request, RequestStream, StreamError, check_stream, reads_memorization
from unlearnbench.streams.memorized import PROXY, held_out_halves, memorization_estimate
from unlearnbench.training import (
    Recipe,
    SupervisedClassifier,
    build_model,
    check_arch_args,
    refit_until_finite,
    train_from_scratch,
    train_together,
    trains_together,
)


class SafePointEachBatch(Callback):
    """Each batch of a fit is a safe point (`unlearnbench.interrupt`): a signal whose exception Python dropped
    (it landed in a weakref callback) stops the fit at the batch, not at the end of the request; at its end too,
    before Lightning's own check raises its `SIGTERMException` instead, which knows nothing of the request."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        raise_if_interrupted()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        raise_if_interrupted()


def trainable_vector(model: nn.Module) -> torch.Tensor:
    """Trainable parameters flattened (BN running statistics are buffers, so never included)."""
    flat = [p.detach().flatten().float().cpu() for p in model.parameters() if p.requires_grad]
    return torch.cat(flat) if flat else torch.zeros(0)  # empty for a frozen model (LOFT's backbone)


class MethodCodeChangedError(ConfigError):
    """A partial run whose method's code changed since its finished requests were served."""


@dataclass
class RunResult:
    run_dir: Path
    rows: list[RequestRecord]
    summary: RunSummary
    already_complete: bool
    #: for a finished run: what changed in the method's code since it ran (`provenance.method_code_change`)
    method_code_change: str | None = None

    def stale_note(self) -> str | None:
        """One line for a finished run whose numbers came from another version of the method's code."""
        if not self.method_code_change:
            return None
        return (
            f"the method's code changed since {self.run_dir} finished ({self.method_code_change}); its numbers are "
            f"the old code's: to rerun, delete that folder or choose another --out"
        )

    @property
    def diverged(self) -> bool:
        return self.summary.status == "diverged"


class Runner:
    """Builds everything for a run without writing anything (so bad input fails clean), then runs it."""

    def __init__(self, plan: RunPlan, reporter: Reporter | None = None, datasets: DatasetCache | None = None):
        """`plan`: the run as `plan.plan_run` resolved it (method, recipe, identity, run directory), so bad input was
        refused before any data is loaded, by the code that plans a suite's cells; the Runner builds from it and
        never plans again. `datasets`: a cache shared by the Runners of a suite, so each dataset is loaded once.
        """
        config = plan.config
        config.hardware.check_available()
        self.config, self.method, self.recipe, self.identity = config, plan.method, plan.recipe, plan.identity
        self.run_dir = RunDirectory(plan.run_dir)
        self.reporter = reporter or Reporter(quiet=True)
        use_cuda = config.hardware.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        self.eval_device = torch.device("cuda" if use_cuda else "cpu")
        self.single_process = str(config.hardware.devices) == "1" and config.hardware.num_nodes == 1
        # In-memory datasets live on the training device: a batch is one gather, no host copy.
        device = self.eval_device if self.eval_device.type == "cuda" and self.single_process else None
        try:
            self.dataset = (datasets or DatasetCache()).load(
                config.data.name, config.data.dir, config.data.download, device, config.data.args
            )
        except DatasetError as error:
            raise ConfigError(str(error)) from error
        if config.data.split == "validation":  # tuning: the test split is not even in memory for this run
            self.dataset = validation_view(self.dataset)
        try:
            check_stream(self.dataset, config.stream.kind, config.stream.requests, self.identity.size)
        except StreamError as error:
            raise ConfigError(str(error)) from error
        self._stream: RequestStream | None = None  # built on first use (`stream`)
        try:  # plasticity guards: callbacks of every unlearning fit, their state saved with the method's
            self.guards = guards_of(config)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"invalid guard arguments: {error}") from error
        self.store = ModelStore(config.store_dir)
        self._pretrained: dict[str, torch.Tensor] | None = None  # `pretrained_model`'s weights, once read
        self._original_logits: EvalLogits | None = None  # the pretrained model's, once evaluated (`original_scores`)
        self._model_shapes: Shapes | None = None  # of the run's arch, for the batched oracles (`oracles`)
        self._stream_digest: str | None = None  # of what every request's scores depend on (`scoring_inputs`)
        self.nodes = NodeGroup.from_environment(config.hardware.num_nodes, self.run_dir.path.name)
        self.train_labels = self.dataset.train.labels.cpu().numpy()
        self.test_labels = self.dataset.test.labels.cpu().numpy()
        # The experiment logger of this session (`config.output.logger`), opened by run(); none until then.
        self.run_logger = RunLogger(self.run_dir.path, self.identity, self.run_dir.path.name)
        #: the request under way (pretraining counts as part of the first request served), for an interruption's message
        self.current_request = 1
        #: what changed in the method's code since the run directory's first session (`_open_run_directory`)
        self.method_code_change: str | None = None

    @property
    def stream(self) -> RequestStream:
        """The run's requests, built on first use: a memorization-stratified kind (`streams.memorized`) draws them
        from the train set's memorization estimate, which needs models trained (`memorization`), so it is built
        once the run starts, never while the run is only being checked; every other kind reads nothing stored."""
        if self._stream is None:
            config = self.config
            self._stream = RequestStream(
                self.dataset,
                config.stream.kind,
                config.stream.requests,
                config.stream.size,
                config.seeds.resolved("stream_seed"),
                batch_seed=config.seeds.resolved("unlearn_seed"),
                memorization=self.memorization() if reads_memorization(config.stream.kind) else None,
            )
        return self._stream

    @classmethod
    def from_config(
        cls, config: RunConfig, reporter: Reporter | None = None, datasets: DatasetCache | None = None
    ) -> Runner:
        """The Runner of one run given alone, planned as `unlearnbench run` plans it (`plan_run`: where the setting
        has no recipe file, the generic recipe)."""
        return cls(plan_run(config, require_recipe=False), reporter, datasets)

    def strategy(self) -> str | Strategy:
        """`ddp` runs each fit in worker processes started from the runner (fork on CPU, spawn on GPUs).

        Lightning's default `ddp` launcher re-executes the whole command in every worker, which would
        repeat pretraining, oracles and file writes per rank; with a process launcher the runner stays
        one process per node (store, evaluation, run directory) and only the fit is distributed.
        `auto` on several devices or nodes means the same. The cluster environment is always read
        from MASTER_ADDR/MASTER_PORT/NODE_RANK (`unlearnbench.nodes`): detecting SLURM would make
        Lightning expect one srun task per device instead of one runner per node.
        """
        if self.single_process or self.config.hardware.strategy not in ("auto", "ddp"):
            return self.config.hardware.strategy
        return DDPStrategy(
            start_method="spawn" if self.eval_device.type == "cuda" else "fork",
            cluster_environment=LightningEnvironment(),
        )

    def fit_logger(self):
        """The experiment logger for per-step losses; none under DDP, where worker processes would
        each append to the run's log files (the per-request metrics are still logged)."""
        return self.run_logger.lightning_logger if self.single_process else False

    def trainer(
        self,
        epochs: int,
        label: str,
        callbacks: tuple = (),
        logger=False,
        max_steps: int = -1,
        one_device: bool = False,
    ) -> L.Trainer:
        """A fresh Trainer on the run's hardware; `max_steps`: stop after so many optimizer steps (`epochs` -1: as many
        epochs as that takes); `one_device`: on the evaluation device alone, for a fit that only the leader makes (an
        evaluation's, `relearn`), which a DDP fit would wait on the other nodes for."""
        hardware = self.config.hardware
        return L.Trainer(
            max_epochs=epochs,
            max_steps=max_steps,
            accelerator=hardware.accelerator,
            devices=1 if one_device else hardware.devices,
            strategy="auto" if one_device else self.strategy(),
            num_nodes=1 if one_device else hardware.num_nodes,
            precision=hardware.precision,
            logger=logger,
            log_every_n_steps=1 if logger else 50,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
            callbacks=[self.reporter.fit_callback(label), StepLossLogger(), SafePointEachBatch(), *callbacks],
        )

    def model_spec(self, excluded: np.ndarray, train_seed: int, batched: bool = False) -> ModelSpec:
        """The store's key for the model trained from scratch on train minus `excluded` with `train_seed` (`batched`:
        in a group by one batched fit)."""
        data, arch = self.config.data, self.config.arch
        return ModelSpec(
            data.name if data.split == "test" else f"{data.name}:{data.split}",
            arch.name,
            self.recipe.as_dict(),
            train_seed,
            tuple(excluded.tolist()),
            data=self.dataset.fingerprint,
            arch_args=check_arch_args(arch.name, arch.args),
            batched=batched,
        )

    def trained_model(
        self, excluded: np.ndarray, label: str, train_seed: int | None = None, batched: bool = False
    ) -> nn.Module:
        """The model trained from scratch on train minus `excluded` with `train_seed` (default: the run's),
        from the store or trained now (`batched`: the model `train_models_together` trains, here in a group of one)."""
        train_seed = self.config.seeds.resolved("train_seed") if train_seed is None else train_seed
        spec = self.model_spec(excluded, train_seed, batched)
        keep = np.setdiff1d(np.arange(len(self.train_labels)), excluded)

        def train() -> dict[str, torch.Tensor]:
            if batched:
                return self.train_models_together([spec], keep, label)[0]
            seed = derived_seed(train_seed, 0)
            make_trainer = partial(self.trainer, label=label)

            def fit(recipe: Recipe) -> nn.Module:
                return train_from_scratch(
                    self.dataset, self.config.arch.name, recipe, keep, seed, make_trainer, spec.arch_args
                )

            if not len(excluded):  # a pretraining recipe that diverges is the user's to fix: the store says how
                return fit(self.recipe).state_dict()
            return refit_until_finite(fit, self.recipe, label).state_dict()

        model = build_model(self.config.arch.name, self.dataset, spec.arch_args)
        model.load_state_dict(self.nodes.get_or_train(self.store, spec, train, model_shapes(model)))
        return model.eval()

    def train_models_together(self, specs: list[ModelSpec], keep: np.ndarray, label: str) -> list[dict]:
        """The models of `specs` (one arch, one recipe, the same data `keep`) trained by one batched fit, each
        seeded as `trained_model` seeds its lone fit."""
        seeds = [derived_seed(spec.seed, 0) for spec in specs]
        make_trainer = partial(self.trainer, label=label)
        arch_args = specs[0].arch_args
        return train_together(self.dataset, self.config.arch.name, self.recipe, keep, seeds, make_trainer, arch_args)

    def pretrained_model(self) -> nn.Module:
        """A fresh copy of the pretrained model: trained on train minus `RequestStream.pretraining_excluded` (the whole
        train set but on an interleaved stream). Its weights are read from the store (file read, sha256 check) once per
        run, not again for every single-shot counterfactual."""
        if self._pretrained is None:  # train minus what an interleaved stream releases later (none on other kinds)
            model = self.trained_model(self.stream.pretraining_excluded, "pretraining")
            self._pretrained = {name: tensor.clone() for name, tensor in model.state_dict().items()}
            return model
        arch = self.config.arch
        model = build_model(arch.name, self.dataset, check_arch_args(arch.name, arch.args))
        model.load_state_dict(self._pretrained)
        return model.eval()

    def memorization(self) -> np.ndarray:
        """The train set's memorization estimate (`streams.memorized`), once per pretrained model: read from the store
        beside it, else computed from the half-models (trained into the store, with the pretraining recipe and train
        seed, each leaving out the half `held_out_halves` names) and stored there. The leader decides whether it is
        computed, so every node makes the half-models' fits together."""
        train_seed = self.config.seeds.resolved("train_seed")
        pretrained = self.model_spec(np.array([], dtype=np.int64), train_seed)
        num_train = len(self.train_labels)
        stored = self.store.load_memorization(pretrained, PROXY, num_train) if self.nodes.leader else None
        if self.nodes.decide("memorization", "stored" if stored is not None else "compute") == "stored":
            return stored
        held_out = held_out_halves(num_train, train_seed)
        probabilities = []
        for k, left_out in enumerate(held_out, start=1):
            model = self.trained_model(left_out, f"memorization estimate: half-model {k}/{len(held_out)}", train_seed)
            probabilities.append(true_label_confidence(self.logits(model).train, self.train_labels))
        estimate = memorization_estimate(np.stack(probabilities), held_out)
        if self.nodes.leader:
            self.store.save_memorization(pretrained, PROXY, estimate)
        return estimate

    def oracle(self, request: Request, k: int, batched: bool = False) -> nn.Module:
        """Oracle k of the request (`--oracle-seeds`: train seed train_seed + k), trained once into the store on train
        minus `Request.excluded` (F_1..F_t, and on an interleaved stream the chunks not yet released)."""
        seeds = self.config.oracle_train_seeds
        which = f", train seed {k + 1}/{len(seeds)}" if len(seeds) > 1 else ""
        return self.trained_model(
            request.excluded, f"oracle {request.t}/{self.config.stream.requests} (retraining{which})", seeds[k], batched
        )

    def oracles(self, request: Request) -> list[nn.Module]:
        """Request t's K oracles (`oracle`).

        The row's oracle (k = 0) is trained alone, as every K = 1 run's is: a run's row is the same whatever K.
        The K − 1 references (RMIA's, the privacy chains') share arch, recipe and data, so where a batched fit
        pays (`training.trains_together`, at least 2 of them, one process on one device) the missing ones are trained together
        in one fit; each equals its lone fit up to float rounding, so they are stored as batched
        (`ModelSpec.batched`). Elsewhere each is trained alone.
        """
        config = self.config
        seeds, excluded = config.oracle_train_seeds, request.excluded
        arch_args = check_arch_args(config.arch.name, config.arch.args)
        together = len(seeds) > 2 and self.single_process and trains_together(config.arch.name, self.dataset, arch_args)
        if together:
            keep = np.setdiff1d(np.arange(len(self.train_labels)), excluded)
            label = f"oracles {request.t}/{config.stream.requests} (retraining, train seeds 2-{len(seeds)} together)"
            specs = [self.model_spec(excluded, seed, batched=True) for seed in seeds[1:]]
            # The shapes of the model they load into, as a lone entry is checked (`trained_model`): entries of
            # another arch are retrained here, in one fit, not one by one when each is loaded. Read from a model
            # built once per run, not once per request.
            if self._model_shapes is None:
                self._model_shapes = model_shapes(build_model(config.arch.name, self.dataset, arch_args))
            self.store.get_or_train_together(
                specs, lambda missing: self.train_models_together(missing, keep, label), self._model_shapes
            )
        return [self.oracle(request, k, batched=together and k > 0) for k in range(len(seeds))]

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
            mia_seed=attack_seed(self.config.seeds.seed, request.t),
            mia_protocol=self.config.protocol.mia_protocol,
        ) | request_phi(logits, self.train_labels, self.test_labels, request)

    def score_oracle(self, request: Request, oracle_logits: list[EvalLogits]) -> dict | None:
        """The row's oracle (the first of request t's) scored on request t; None without oracles.

        The oracle is its own reference, so the keys of the oracle-referenced attacks are None in its row.
        Computed once per request and passed to every model scored against it (`score_request`): the
        method's row and the original's.
        """
        if not oracle_logits:
            return None
        oracle = oracle_logits[0]
        return reference_scores(
            digest("oracle", self.scoring_inputs(request), oracle.train, oracle.test),
            lambda: self.score(oracle, request) | dict.fromkeys((*ATTACK_KEYS, *RMIA_KEYS, *TOW_KEYS)),
        )

    def scoring_inputs(self, request: Request) -> str:
        """A digest of what request t's scores depend on besides the scored logits: the labels, every request's index
        sets, the attack seed and protocol, the user's metrics. With the logits, it keys `reference_scores`."""
        if self._stream_digest is None:
            sets = [
                (r.t, r.forget, r.forgotten, r.unseen, r.test_forget, r.forget_classes) for r in self.stream.requests
            ]
            self._stream_digest = digest(
                self.train_labels,
                self.test_labels,
                self.dataset.num_classes,
                self.config.protocol.mia_protocol,
                [(metric.key, metric.compute) for metric in user_metrics()],
                *(part for request_sets in sets for part in request_sets),
            )
        return digest(self._stream_digest, request.t, attack_seed(self.config.seeds.seed, request.t))

    def score_request(
        self, request: Request, logits: EvalLogits, oracle_logits: list[EvalLogits], oracle_scores: dict | None
    ) -> tuple[dict, dict]:
        """Request t's scores of one model from its logits: its `score`, and its keys against the first oracle
        (gaps, attack, privacy; empty without oracles), given that oracle's `score_oracle`.

        The one owner of what scoring a request is: the runner's rows and the bare baseline of
        benchmarks/perf.py (P1b) both call it, so that row times the runner's orchestration, not the
        metrics (P2 times those). A row puts the runner's timings between the two parts.
        """
        scores = self.score(logits, request)
        if not oracle_logits:
            return scores, {}
        labels = self.train_labels, self.test_labels
        versus = {"gap": avg_gap(scores, oracle_scores), "gap_acc": avg_gap(scores, oracle_scores, gap_keys(GAP_ACC))}
        versus |= request_attack(logits, oracle_logits[0], *labels, request)
        versus |= request_privacy(logits, oracle_logits, scores | versus, oracle_scores, *labels, request)
        return scores, versus

    def learn(self, t: int) -> None:
        """The learning step before request t, where train data were released since t − 1 (`streams.interleaved`):
        the method's current model fine-tuned on `RequestStream.learning_set` with the pretraining recipe's SGD for the
        kind's `learning_epochs`, then checkpointed (`save_learned_state`). Nothing where nothing was released.

        One step for every method: it trains the parameters of the model the method deploys that require gradients
        (every weight of a plain model; of LOFT's, only the projection UUᵀ, which its next request recomputes from the
        frozen backbone, so LOFT's model never keeps what it learns), never what a method or guard keeps beside the
        model (LOFT's U, a guard's anchor), which its next request reads off the learned model. Seeded from (train seed,
        t) (`seeds.learning_seed`): a run resumed before it learns the same weights again, one resumed after it reads
        them.
        """
        config, stream = self.config, self.stream
        seed = learning_seed(config.seeds.resolved("train_seed"), t)
        indices = stream.learning_set(t, seed)
        if not len(indices):
            return
        recipe = replace(self.recipe, epochs=STREAMS.get(stream.kind).learning_epochs)
        L.seed_everything(seed, verbose=False)
        loader = self.dataset.loader(
            self.dataset.train, torch.as_tensor(indices), recipe.batch_size, augment=True, shuffle=True, seed=seed
        )
        label = f"learning {len(stream.released_before(t))} new samples before request {t}/{config.stream.requests}"
        placed = self.method.device
        self.method.model.train()  # as pretraining trains (Lightning keeps the eval mode evaluation left it in)
        self.trainer(recipe.epochs, label).fit(
            SupervisedClassifier(self.method.model, recipe), train_dataloaders=loader
        )
        self.method.model.eval()
        self.method.to(placed)  # Lightning's teardown leaves the module on the CPU
        if self.nodes.leader:
            self.run_dir.save_learned_state(t, self.method.resume_state() | pack_state(self.guards))

    def serve(self, request: Request) -> dict:
        """Prepare and unlearn request t with the continual method; returns the timings and update norm."""
        label = f"unlearning {request.t}/{self.stream.num_requests}"
        served = self.fit_request(self.method, self.guards, request, label, logged=True)
        self.last_update = served.pop("update")  # (layout, u_t), stored by run()
        # Scored by the leader (`_serve_request`); logits that overflowed mean the request diverged, as a
        # non-finite loss or weight does.
        self.method_logits = self.logits(self.method) if self.nodes.leader else None
        if self.method_logits is not None and not self.method_logits.finite:
            served["diverged"] = True
        return served

    def fit_request(self, method: UnlearningMethod, guards: list, request: Request, label: str, logged: bool) -> dict:
        """Prepare and unlearn `request` with `method` seeded from (unlearn seed, t); `logged`: its step losses are logged."""
        L.seed_everything(derived_seed(self.config.seeds.resolved("unlearn_seed"), request.t), verbose=False)
        before = snapshot(method)  # θ_{t−1}, for u_t = θ_t − θ_{t−1}
        start = time.perf_counter()
        view = self.stream.view()
        for guard in guards:
            guard.before_request(method, view)
        try:
            method.prepare(request.public(), view)
            prepared = True
        except DegenerateModelError:  # the model degenerated before this request: nothing to fit, it diverged
            prepared = False
        prepare_s = time.perf_counter() - start
        self.stream.configure_batches(method.batch_mode, method.batch_size)

        monitor = DivergenceMonitor()

        def fit(epochs: int) -> None:
            if logged:
                self.run_logger.begin_fit()
            logger = self.fit_logger() if logged else False
            trainer = self.trainer(epochs, label, callbacks=(monitor, *guards), logger=logger)
            placed = method.device
            trainer.fit(method, datamodule=self.stream)
            # Lightning's teardown leaves the module on the CPU; a method that prepares again between fits (RUM's
            # stages: SalUn's mask) must find the model where the request's own prepare did (found on a GPU).
            method.to(placed)

        _synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        if prepared:
            method.unlearn(fit)
        _synchronize()
        rte_s, rte_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
        for guard in guards:
            guard.after_request(method, view)
        layout, update = parameter_update(before, method)
        diverged = not prepared or monitor.diverged or not bool(np.isfinite(update).all())
        update_norm = float(np.linalg.norm(update.astype(np.float64)))
        return {
            "rte_s": rte_s,
            "rte_cpu_s": rte_cpu_s,
            "prepare_s": prepare_s,
            "update_norm": update_norm,
            "diverged": diverged,
            "update": (layout, update),
        }

    def counterfactual(self, t: int, kind: str) -> tuple[Request, list[Request]]:
        """Request t as a single-shot counterfactual of `kind` serves it, and the requests its method may see as past.

        `single_task` is the plasticity-collapse paper's single-task unlearning: F_t alone, retain =
        train minus F_t, no past (`RequestStream.alone`). `cumulative` keeps request t's own sets,
        retain = train minus F_1..F_t, and its past: it isolates the model's history from the data's.
        """
        if kind == "single_task":
            return self.stream.alone(t), []
        return self.stream.requests[t - 1], self.stream.requests[: t - 1]

    def single_shot_fit(self, request: Request, past: list[Request]) -> tuple[UnlearningMethod, dict]:
        """`request` served once from the pretrained model: a fresh method (same hyperparameters), fresh guards, t's seed.

        The counterfactual of the plasticity-collapse paper's "single-task baseline": what the same
        method does to this request when it is the first one it serves.
        """
        config = self.config
        method = METHODS.get(config.method.name)(**config.method_kwargs())
        guards = guards_of(config)
        method.attach(self.pretrained_model(), self.dataset.num_classes).to(self.eval_device)
        label = f"single-shot {request.t}/{config.stream.requests}"
        with self.stream.serving(request, past):
            return method, self.fit_request(method, guards, request, label, logged=False)

    def single_shot_key(self, request: Request) -> str:
        """What a single-shot result depends on: method, hyperparameters, pretrained model, F_t (and the sets
        it is scored on and retains: the baselines differ there), the request's seeds and the scoring protocol;
        never T or the requests after t."""
        identity = self.identity
        parts = {
            "method": identity.method,
            "method_args": identity.method_args,
            "guards": identity.guards,
            "pretrained": self.model_spec(np.array([], dtype=np.int64), self.config.seeds.resolved("train_seed")).key(),
            "precision": identity.precision,
            "mia_protocol": identity.mia_protocol,
            "seeds": [
                derived_seed(self.config.seeds.resolved("unlearn_seed"), request.t),
                attack_seed(self.config.seeds.seed, request.t),  # the attacks' subsampling (`score`)
            ],
            "forget": sha256_bytes(np.asarray(request.forget, dtype=np.int64).tobytes()),
            "retain": sha256_bytes(np.asarray(request.retain, dtype=np.int64).tobytes()),
            "test_retain": sha256_bytes(np.asarray(request.test_retain, dtype=np.int64).tobytes()),
        }
        return sha256_bytes(json.dumps(parts, sort_keys=True).encode())[:24]

    def single_shot(self, t: int, kind: str, continual_scores: dict | None) -> dict | None:
        """The scores of request t's single-shot counterfactual of `kind`, from the store's cache or served now
        (and cached).

        At t = 1 the continual method *is* the single-shot one of either kind (same pretrained model,
        request and seed), so its scores are taken as they are rather than computed twice; a test
        checks that a fresh single-shot fit gives exactly them. The leader decides whether the fit is
        needed (the cache is on a shared store another process may fill); a follower fits in step and
        gets None.
        """
        request, past = self.counterfactual(t, kind)
        leader = self.nodes.leader
        key = self.single_shot_key(request) if leader else None
        cached = self.store.load_scores(key) if leader else None
        fits = self.nodes.decide(f"single-shot-{kind}-{t}", "fit" if cached is None and t > 1 else "cached")
        served = self.single_shot_fit(request, past) if fits == "fit" else None
        if not leader or cached is not None:
            return cached
        if served is None:  # t = 1
            scores = dict(continual_scores)
        else:
            method, timings = served
            logits = self.logits(method)
            # A counterfactual whose logits overflowed has no accuracies to score: its gain is then None
            # (`forward_gain`), and the record says it diverged.
            scores = (self.score(logits, request) if logits.finite else {}) | {"update_norm": timings["update_norm"]}
            if timings["diverged"] or not logits.finite:
                scores["diverged"] = True
        scores.pop("history", None)  # the continual run's diagnostic: the single-shot model serves one request
        self.store.save_scores(key, scores)
        return scores

    def original_scores(self, request: Request, oracle_logits: list[EvalLogits], oracle_scores: dict | None) -> dict:
        """The pretrained model on request t's sets, against request t's oracles where it has them (`score_request`):
        the "Original" row of every paper table. Its logits are computed once per session."""
        if self._original_logits is None:
            self._original_logits = self.logits(self.pretrained_model())
        original = self._original_logits
        key = digest(
            "original",
            self.scoring_inputs(request),
            original.train,
            original.test,
            *(part for oracle in oracle_logits for part in (oracle.train, oracle.test)),
        )
        scores, versus = reference_scores(
            key, lambda: self.score_request(request, original, oracle_logits, oracle_scores)
        )
        if request.t > 1:
            scores.pop("history")  # the same row at every t: kept at t = 1 only (`original_history`)
        return scores | versus

    def robustness(
        self, request: Request, oracle: nn.Module | None, oracle_logits: list[EvalLogits]
    ) -> dict[str, dict]:
        """Request t's robustness keys where they are scheduled, by side of the row (method, oracle where t has one,
        original): the relearning attack's (`evaluation.relearn`) and the quantized accuracies
        (`evaluation.quantization`). The oracle's and the original's are computed once per process for every run of
        a setting (`reference_scores`, keyed by their logits and the protocol's every input)."""
        config, t = self.config, request.t
        if not (config.quantize_at(t) or config.relearn_at(t)):
            return {}
        models = {"method": self.method.model, "oracle": oracle, "original": self.pretrained_model()}
        sides: dict[str, dict] = {side: {} for side, model in models.items() if model is not None}
        inputs = digest(  # of what every side's numbers depend on besides the protocol's settings
            self.scoring_inputs(request), *(part for logits in oracle_logits for part in (logits.train, logits.test))
        )
        if config.quantize_at(t):

            def accuracies(model: nn.Module) -> dict[str, float | None]:
                inputs = ScoringInputs(
                    self.logits(model), self.train_labels, self.test_labels, request, self.dataset.num_classes
                )
                return {key: METRIC_KEYS[key].compute(inputs) for key in QUANTIZED_METRICS}

            bits = list(config.protocol.quantize_bits)
            for side in sides:
                model = models[side]
                compute = partial(quantized_scores, model, bits, accuracies)
                sides[side] |= compute() if side == "method" else reference_scores(digest(inputs, side, bits), compute)
        if config.relearn_at(t):
            seed, protocol = relearn_seed(config.seeds.seed, t), config.protocol
            split = relearn_split(request.forgotten, request.retain, protocol.relearn_fraction, seed)
            label = f"relearning attack {t}/{config.stream.requests}"
            make_trainer = partial(self.trainer, -1, label, one_device=True)
            curve = partial(relearn_curve, dataset=self.dataset, split=split, recipe=self.recipe, seed=seed)
            settings = (protocol.relearn_steps, protocol.relearn_fraction, seed, self.recipe, config.hardware.precision)
            curves = {"method": curve(models["method"], steps=protocol.relearn_steps, make_trainer=make_trainer)}
            if oracle is not None:
                curves["oracle"] = reference_scores(
                    digest(inputs, "relearn", settings),
                    lambda: {"curve": curve(oracle, steps=protocol.relearn_steps, make_trainer=make_trainer)},
                )["curve"]
            original_accuracy = heldout_accuracy(models["original"], self.dataset, split.heldout)
            for side, scores in relearn_scores(curves, original_accuracy, protocol.relearn_margin).items():
                sides[side] |= scores
        return sides

    def run(self) -> RunResult:
        """All T requests, resuming after the last persisted one.

        numpy's OpenBLAS pool busy-waits for a while after every call (update norms, the Gram
        matrix, the attacks) and so takes the cores that torch's intra-op pool needs for the next
        fit or forward pass (a T=5 run on 2 cores went from 1.27x to 1.14x a bare loop with this
        alone). The numpy side is small, so it runs on one thread and torch keeps every core.
        """
        self.cost_since = (time.perf_counter(), time.process_time())  # each row's `cost` runs from the one before
        try:
            lock = self.run_dir.lock() if self.nodes.leader else nullcontext()  # a follower writes nothing there
            with threadpool_limits(limits=1, user_api="blas"), lock:
                result = self._serve_stream()
            self.nodes.part()
            return result
        except Interrupted as interrupt:
            interrupt.where = interrupt.where or f"request {self.current_request}"
            self.run_logger.finish(failed=True)
            raise

    def _serve_stream(self) -> RunResult:
        """The one request loop, for one node and for every node of a run on several.

        Every node makes the same fits in the same order (the request's, its oracles', its
        single-shot counterfactual's), since a fit on several nodes is one DDP fit. What only
        node 0 does — opening the run directory, evaluation, geometry, persistence, logging — is a
        step the followers skip; what they cannot know (where the run resumes, whether a request
        diverged, whether a fit is cached) the leader decides for every node (`NodeGroup.decide`).
        """
        config, run_dir, leader = self.config, self.run_dir, self.nodes.leader
        stream = self.stream  # on every node, before the leader writes its manifest: a stratified kind's fits first
        rows = self._open_run_directory() if leader else []
        complete = leader and is_finished(rows, config.stream.requests)
        resumed = unpack_state(run_dir.load_state(len(rows)), self.guards) if rows and not complete else None
        if leader and not complete:
            self._begin_session(rows)
        start = int(self.nodes.decide("start", config.stream.requests + 1 if complete else len(rows) + 1))
        if not leader and 1 < start <= config.stream.requests:  # read before the leader moves past it
            resumed = unpack_state(run_dir.load_state(start - 1), self.guards)
        if start > config.stream.requests:
            return self._finish(rows, already_complete=True)
        # killed between the learning step before `start` (interleaved streams) and that request: its checkpoint
        learned = self.nodes.decide("learned", "stored" if leader and run_dir.has_learned_state(start) else "no")
        if learned == "stored":
            resumed = unpack_state(run_dir.load_learned_state(start), self.guards)
        self.method.attach(self.pretrained_model(), self.dataset.num_classes).to(self.eval_device)
        if resumed is not None:
            self.method.load_resume_state(resumed)
            if leader:
                self.reporter.message(f"resuming at request {start}/{config.stream.requests}")
        for t in range(start, config.stream.requests + 1):
            self.current_request = t
            raise_if_interrupted()
            request = stream.select(t)
            if not (t == start and learned == "stored"):
                self.learn(t)
            timings = self.serve(request)
            diverged = timings.pop("diverged")
            if self.nodes.decide(f"request-{t}", "diverged" if diverged else "ok") == "diverged":
                if leader:
                    self._record(rows, RequestRecord(t, "diverged", request.forget_classes, timings, None, None))
                    self.reporter.message(f"request {t} diverged (non-finite loss or weights): the run stops here")
                break
            self._serve_request(request, timings, rows)
        return self._finish(rows, already_complete=False)

    def _open_run_directory(self) -> list[RequestRecord]:
        """Leader: the run directory initialized, its finished rows, and a refusal to resume over changed code."""
        config, run_dir = self.config, self.run_dir
        run_dir.initialize(self.identity, self.stream.manifest(), self.train_labels, self.test_labels)
        rows = run_dir.rows()
        # A damaged file the rerun rebuilds is rebuilt (manifest and labels above, the derived files as the run goes
        # on or finishes); any other is refused before anything is written.
        for damage in run_dir.damages(self.identity, rows):
            if not damage.rebuilt:
                raise damage.error
        self.current_request = len(rows) + 1
        self.method_code = method_code(
            type(self.method), [*self.method.code_parts(), *map(type, self.guards), *user_metric_code()]
        )
        self.method_code_change = method_code_change(run_dir.recorded_method_code(), self.method_code) if rows else None
        if self.method_code_change and not is_finished(rows, config.stream.requests):
            raise MethodCodeChangedError(
                f"the code of method {config.method.name!r} changed since requests 1-{len(rows)} were served in "
                f"{run_dir.path} ({self.method_code_change}); resuming would mix two versions' numbers: delete that "
                f"folder or choose another --out to rerun"
            )
        if not is_finished(rows, config.stream.requests):
            # A damaged update file or a checkpoint that is missing or not weights-only is refused before anything
            # is written: the updates here, the checkpoint by the caller right after.
            # updates.f32 + geometry.csv
            self.geometry = GeometryRecorder(run_dir.path, config.stream.requests, len(rows))
        return rows

    def _begin_session(self, rows: list[RequestRecord]) -> None:
        """Leader, once the files a resume needs are read (before the other nodes are told to start): the session
        is recorded and logged."""
        config, run_dir = self.config, self.run_dir
        run_dir.record_session(session_record(len(rows) + 1, self.method_code))
        self.run_logger = open_run_logger(
            config.output.logger, run_dir.path, self.identity, run_dir.path.name, len(rows) + 1
        )
        self.reporter.start_run(run_dir.path.name, config.stream.requests, done=len(rows))
        run_dir.repair_derived(rows)  # a kill between metrics.jsonl and history.csv left it short

    def _serve_request(self, request: Request, timings: dict, rows: list[RequestRecord]) -> None:
        """After the unlearning fit of request t: evaluation (leader), the oracles' and the single-shot fits
        (every node), the scores against them and persistence (leader)."""
        config, t, leader = self.config, request.t, self.nodes.leader
        method_logits = self.method_logits  # computed by `serve`, which decided they are finite
        oracles = self.oracles(request) if config.oracle_at(t) else []
        oracle_logits = [self.logits(oracle) for oracle in oracles] if leader else []
        oracle_scores = self.score_oracle(request, oracle_logits) if leader else None
        scores, versus = (
            self.score_request(request, method_logits, oracle_logits, oracle_scores) if leader else (None, None)
        )
        single_shots = {}
        if config.single_shot_at(t):
            continual = (
                None if scores is None else scores | {"update_norm": timings["update_norm"]}
            )  # a follower has none
            single_shots = {
                SINGLE_SHOT_FIELDS[kind]: self.single_shot(t, kind, continual) for kind in config.single_shot_kinds
            }
        if not leader:
            return
        age = {"age": self.stream.age(t)} if self.stream.learns_between_requests else {}
        method_scores = scores | age | timings | self.geometry.record(t, *self.last_update) | versus
        for field, single_shot in single_shots.items():
            method_scores[f"forward_gain{field.removeprefix('single_shot')}"] = forward_gain(method_scores, single_shot)
        original = self.original_scores(request, oracle_logits, oracle_scores)
        sides = {"method": method_scores, "oracle": oracle_scores, "original": original}
        for side, robustness in self.robustness(request, oracles[0] if oracles else None, oracle_logits[:1]).items():
            sides[side].update(robustness)
        single_shots = {"single_shot": None} | single_shots  # the record's positional field, None off schedule
        row = RequestRecord(
            t, "ok", request.forget_classes, method_scores, oracle_scores, **single_shots, original=original
        )
        self.run_dir.save_state(t, self.method.resume_state() | pack_state(self.guards))
        if config.output.save_logits:
            self.run_dir.save_logits(t, vars(method_logits), [vars(logits) for logits in oracle_logits])
        self._record(rows, row)
        self.run_dir.drop_states_before(t)
        self.reporter.request(row, config.stream.requests)

    def _record(self, rows: list[RequestRecord], row: RequestRecord) -> None:
        """Leader: request t's row, with what it cost since the previous one (or since the session began),
        appended to metrics.jsonl (it is then finished) and logged."""
        wall, cpu = time.perf_counter(), time.process_time()
        row = replace(row, cost={"wall_s": wall - self.cost_since[0], "cpu_s": cpu - self.cost_since[1]})
        self.cost_since = (wall, cpu)
        self.run_dir.append_row(row)
        self.run_logger.log_request(row)
        rows.append(row)

    def _finish(self, rows: list[RequestRecord], already_complete: bool) -> RunResult:
        """The summary over the finished requests; a diverged run says where it stopped. A follower has none."""
        if not self.nodes.leader:
            summary = RunSummary(0, {}, f"followed node 0 as node {self.nodes.rank}")
            return RunResult(self.run_dir.path, [], summary, already_complete=already_complete)
        scored = [row for row in rows if row.status == "ok"]
        summary = RunSummary(
            requests_done=len(scored),
            scores=stream_summary(scored) if scored else {},
            status="diverged" if ended_diverged(rows) else "complete",
            diverged_at=rows[-1].t if ended_diverged(rows) else None,
        )
        if already_complete:  # rewritten only where it disagrees with metrics.jsonl: a finished run stays as it is
            self.run_dir.repair_derived(rows, summary, recompute_geometry)
        else:
            self.run_dir.write_summary(summary)
        self.run_logger.finish()
        result = RunResult(self.run_dir.path, rows, summary, already_complete=already_complete)
        return replace(result, method_code_change=self.method_code_change)


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def guards_of(config: RunConfig) -> list:
    """The guards of `config`'s guards part, built fresh, in the order they apply."""
    return build_guards(config.guard_names, {guard.name: guard.args for guard in config.guards})
