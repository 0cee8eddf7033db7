"""Performance targets of the runner, measured as ratios side by side in one process.

    python benchmarks/perf.py [--repeats 5] [--json benchmarks/out/perf.json] [--only P6 ...]

Rows (target in brackets; machines here are noisy, so every target is a ratio against a baseline
measured in the same script, interleaved, median of the repeats):

- P1a  one request's unlearning fit (FT, 5 epochs) / a hand-written PyTorch loop doing the same
       optimizer steps on the same batches                                          [<= 1.10]
- P1b  a whole T=5 FT run (warm store) / a hand-written loop with the same fits, the same eval
       forward passes of method, oracle and original model and the same scoring (`Runner.score_request`): the
       runner's orchestration (Lightning, persistence, logging, console, resume)      [<= 1.05]
- P1c  the least P1a can be while Lightning runs the loop: P1a's fit by the least any LightningModule's step costs
       in a plain Trainer (P7d) / the bare loop                                       [reported]
- P2   evaluation (forward pass + every metric) at t = 9 / at t = 1, T = 9             [<= 1.20]
- P3   a suite of M = 4 methods on one stream: models trained = T oracles + 1 pretrained;
       a second invocation trains none; suite time / (M x one run) reported           [exact counts]
- P4   LOFT per-request time after the one-shot feature pass                          [< 1 s]
- P5   ER/CO for d = 10M parameters and T = 50 requests: peak RSS of that process      [< 1 GB]
- P6   per-request bookkeeping (everything but unlearning, evaluation and training: the request's
       selection, checkpoint, metrics row, history line, logger, console) at t = 100 / at t = 10 of a
       T = 100 random stream                                                        [<= 1.20]
- P7   fits on the memorizing tier (Fashion-MNIST, 10,000 train images, no augmentation) / a hand-written
       PyTorch loop over the split's normalized tensors with the same optimizer, steps and threads:
       P7a pretraining the `mlp` (its recipe, 5 epochs), P7b one FT request on it (random stream, 1%),
       P7c pretraining the small CNN (`--arch.pools 2`, its recipe, 1 epoch)          [<= 1.10]
       P7d what P7a's ratio is made of: the loop's own cost a step, the runner's fit of a near-zero model (784 -> 1
       -> 10) against the bare loop's, beside a plain Lightning Trainer's (no callbacks, logger or checkpointing)
       fitting it by Lightning's manual optimization (`manual_backward`, `LightningOptimizer.step`) and the least
       any LightningModule's step costs in that Trainer (manual optimization, the bare backward and optimizer
       step)                                                                         [reported]
       P7e the least P7a can be while Lightning runs the loop: the bare `mlp` step plus that least loop cost,
       over the bare step                                                            [reported]
- P8   K = 16 oracles of the memorizing tier's `mlp` (its recipe, 2 epochs) in one batched fit
       (`training.train_together`) / the same 16 fitted one by one (`train_from_scratch`), default threads [<= 0.5]
       P8b the least P8 can be on this machine: the K fits' forward and backward products, stacked (`bmm`), and
       the recipe's SGD step on the stacked weights, over the lone fits' time (the products alone beside it)
                                                                                     [reported]
- P9   a suite's peak RSS growth per cell (16 cells of the memorizing tier against 4): a finished cell's runner
       is freed                                                                       [<= 2 MB]
       P9b the same for a tune study's trials (FT, 16 trials against 4): a finished trial's runner is freed
                                                                                     [<= 2 MB]
- P10  the gradient statistics of Fisher forgetting and IU on the tier's `mlp` (1,024 samples, one thread), with
       linear layers' per-sample gradients factored (`methods.sample_gradients`) / materialized by `torch.func`:
       P10a the diagonal Fisher (Σ (g + ε)²), P10b IU's H⁻¹v (Gram matrix, G v, Gᵀc)       [<= 0.10]
- S1/S2/S5 `unlearnbench --help` / `unlearnbench list` / `unlearnbench tune --help` wall time [< 1.5 s]
- S3   a refused `run` (unknown method, `--requests 0`, a config file that is not YAML, a `--data-dir` that does
       not exist, a misspelt option, a value of the wrong type, an unknown `--oracle`, a bad `--recipe`, a method's
       hyperparameter out of range or unknown, a guard's argument of the wrong type, a dataset's subset smaller
       than its classes, an arch argument < 1, a method's group given whole or in a config file's section with a
       value out of range, a section that is no mapping, a stream longer than the dataset's classes, an unknown
       `--accelerator`, `--strategy` or `--precision`), the slowest of them: wall time, the import of the runner
       beside it                                                                      [< 2 s]
- S4   a refused `suite` and `tune` (an unknown method, `requests: 0` in a cell or a study, the published suite
       with a bad 325th cell, a suite file that is not YAML, a misspelt `tune` option, an unknown objective), the slowest of them: wall time, the import of
       the runner beside it                                                           [< 2 s]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
import yaml
from threadpoolctl import threadpool_limits

warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

from unlearnbench.config import RunConfig  # noqa: E402
from unlearnbench.evaluation import reference_scores  # noqa: E402
from unlearnbench.evaluation.evaluator import compute_logits  # noqa: E402
from unlearnbench.evaluation.keys import METRIC_KEYS  # noqa: E402
from unlearnbench.records import RequestRecord  # noqa: E402
from unlearnbench.rundir import RunDirectory  # noqa: E402
from unlearnbench.runner import Runner  # noqa: E402

ROWS: list[dict] = []


def report(key: str, what: str, value: float, target: str, passed: bool, detail: str = "") -> None:
    ROWS.append({"key": key, "what": what, "value": value, "target": target, "pass": passed, "detail": detail})
    print(f"{key:4} {what:58} {value:9.3f}  {target:9} {'PASS' if passed else 'FAIL'}  {detail}", flush=True)


def _config(root: Path, method: str = "finetune", requests: int = 5, **kwargs) -> RunConfig:
    return RunConfig.from_options(
        method=method, requests=requests, out=root / "runs", store=root / "store", logger="none", **kwargs
    )


def _bare_fit(model: torch.nn.Module, loader, epochs: int, lr: float, momentum: float, weight_decay: float) -> None:
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    for _ in range(epochs):
        for batch in loader:
            loss = F.cross_entropy(model(batch["retain"].x), batch["retain"].y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _alternating_ratios(ours, bare, repeats: int) -> list[float]:
    """ours(repeat) / bare(repeat) per repeat, alternating which goes first, so drift on a noisy machine cancels."""
    ratios = []
    for repeat in range(repeats):
        first, second = (bare, ours) if repeat % 2 else (ours, bare)
        seconds = {first: first(repeat), second: second(repeat)}
        ratios.append(seconds[ours] / seconds[bare])
    return ratios


def p1_fit(root: Path, repeats: int) -> None:
    # `Runner.run` keeps numpy's BLAS on one thread (see there); `serve` called alone must too.
    with threadpool_limits(limits=1, user_api="blas"):
        _p1_fit(root, repeats)


def _p1_fit(root: Path, repeats: int) -> None:
    runner = Runner.from_config(_config(root, method_args={"optim": {"epochs": 5}}))
    pretrained = runner.trained_model(np.zeros(0, dtype=np.int64), "pretraining")
    state = {k: v.clone() for k, v in pretrained.state_dict().items()}
    request = runner.stream.select(1)
    hp = runner.method.optim

    def ours(_repeat: int) -> float:
        pretrained.load_state_dict(state)
        runner.method.attach(pretrained, runner.dataset.num_classes)
        return runner.serve(request)["rte_s"]

    def bare(_repeat: int) -> float:
        pretrained.load_state_dict(state)
        runner.stream.configure_batches(runner.method.batch_mode, hp.batch_size)
        start = time.perf_counter()
        _bare_fit(pretrained, runner.stream.train_dataloader(), hp.epochs, hp.lr, hp.momentum, hp.weight_decay)
        return time.perf_counter() - start

    def least(_repeat: int) -> float:
        pretrained.load_state_dict(state)
        runner.stream.configure_batches(runner.method.batch_mode, hp.batch_size)
        trainer = _plain_trainer(hp.epochs)
        start = time.perf_counter()
        trainer.fit(_LeastUnlearningFit(pretrained, hp), train_dataloaders=runner.stream.train_dataloader())
        return time.perf_counter() - start

    ratios = _alternating_ratios(ours, bare, repeats)
    ratio = statistics.median(ratios)
    spread = f"repeats {min(ratios):.3f}..{max(ratios):.3f}"
    report("P1a", "FT fit, 5 epochs: runner / bare PyTorch loop", ratio, "<= 1.10", ratio <= 1.10, spread)
    floors = _alternating_ratios(least, bare, repeats)
    spread = f"repeats {min(floors):.3f}..{max(floors):.3f}"
    report("P1c", "least P1a in Lightning's loop: P7d's least fit / bare loop", statistics.median(floors), "report",
           True, spread)  # fmt: skip


def _bare_run(root: Path, _repeat: int) -> float:
    """The same T=5 FT fits on the same batches, the method's, the oracle's and (once) the original model's eval
    passes and their scoring: the method and the original against the oracle, as every row holds them.

    The scoring runs with numpy's BLAS on one thread, as in `Runner.run`: same scoring, same cost.
    """
    reference_scores.clear()
    start = time.perf_counter()
    bare = Runner.from_config(_config(root))
    model = bare.trained_model(np.zeros(0, dtype=np.int64), "pretraining")
    hp = bare.method.optim
    with threadpool_limits(limits=1, user_api="blas"):
        original = compute_logits(model, bare.dataset)
        for t in range(1, bare.stream.num_requests + 1):
            request = bare.stream.select(t)
            bare.stream.configure_batches(bare.method.batch_mode, hp.batch_size)
            _bare_fit(model, bare.stream.train_dataloader(), hp.epochs, hp.lr, hp.momentum, hp.weight_decay)
            oracle = [compute_logits(bare.trained_model(request.forgotten, "oracle"), bare.dataset)]
            oracle_scores = bare.score_oracle(request, oracle)
            bare.score_request(request, compute_logits(model, bare.dataset), oracle, oracle_scores)
            bare.score_request(request, original, oracle, oracle_scores)
    return time.perf_counter() - start


def _runner_run(root: Path, repeat: int) -> float:
    reference_scores.clear()  # one run scores its oracles and original as a fresh process does, as the loop does
    start = time.perf_counter()
    Runner.from_config(_config(root, run_dir=root / f"p1b-{repeat}")).run()
    return time.perf_counter() - start


def p1_run(root: Path, repeats: int) -> None:
    Runner.from_config(_config(root)).run()  # warm the store: pretrained model and every oracle
    ratios = _alternating_ratios(partial(_runner_run, root), partial(_bare_run, root), repeats)
    ratio = statistics.median(ratios)
    spread = f"repeats {min(ratios):.3f}..{max(ratios):.3f}"
    report("P1b", "whole T=5 FT run (warm store): runner / bare loop", ratio, "<= 1.05", ratio <= 1.05, spread)


def p2_eval(root: Path, repeats: int) -> None:
    runner = Runner.from_config(_config(root, requests=9))
    model = runner.trained_model(np.zeros(0, dtype=np.int64), "pretraining")

    def evaluate(t: int) -> float:
        start = time.perf_counter()
        runner.score(compute_logits(model, runner.dataset), runner.stream.select(t))
        return time.perf_counter() - start

    ratios = [evaluate(9) / evaluate(1) for _ in range(repeats)]
    ratio = statistics.median(ratios)
    report("P2", "evaluation at t=9 / at t=1 (T=9)", ratio, "<= 1.20", ratio <= 1.20)


def p3_suite(root: Path) -> None:
    from unlearnbench.suite import run_suite

    methods = ["finetune", "ga", "rl", "salun"]
    common = {"requests": 3, "logger": "none"}

    def suite(out: Path) -> dict:
        return {"out": str(out), "common": common, "methods": methods, "streams": ["classwise"], "leaderboard": False}

    start = time.perf_counter()
    single = _config(root / "p3-single", requests=3)
    Runner.from_config(single).run()
    one_run = time.perf_counter() - start
    start = time.perf_counter()
    first = run_suite(suite(root / "p3-suite"))
    suite_time = time.perf_counter() - start
    second = run_suite(suite(root / "p3-suite"))
    expected = 3 + 1
    report("P3a", "suite of M=4 methods, T=3: models trained (= T oracles + 1)", first.trained, f"== {expected}",
           first.trained == expected)  # fmt: skip
    report("P3b", "second invocation of the same suite: models trained", second.trained, "== 0", second.trained == 0)
    ratio = suite_time / (len(methods) * one_run)
    report("P3c", "suite time / (M x one cold run)", ratio, "report", True, f"one run {one_run:.1f}s")


def p4_loft(root: Path) -> None:
    runner = Runner.from_config(_config(root, method="loft"))
    result = runner.run()
    after_first = [row.method["rte_s"] for row in result.rows[1:]]
    worst = max(after_first)
    passes = runner.method.cache.passes
    report("P4a", "LOFT per-request time after the feature pass (max, t>=2)", worst, "< 1 s", worst < 1.0)
    report("P4b", "LOFT feature forward passes over the stream (one model)", passes, "report", True)


def p5_geometry() -> None:
    code = (
        "import resource, sys, tempfile\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from unlearnbench.evaluation.geometry import UpdateStore, compute_geometry\n"
        "d, T = 10_000_000, 50\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    store, rng = UpdateStore(Path(folder), T), np.random.default_rng(0)\n"
        "    for t in range(1, T + 1):\n"
        "        store.write(t, rng.standard_normal(d, dtype=np.float32), [('w', (d,))])\n"
        "    compute_geometry(store, T)\n"
        "status = Path('/proc/self/status')\n"
        "if status.exists():  # VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's)\n"
        "    print(int(next(l for l in status.read_text().splitlines() if l.startswith('VmHWM')).split()[1]) / 1024)\n"
        "else:\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    )
    start = time.perf_counter()
    peak = float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    seconds = time.perf_counter() - start
    report("P5", "ER/CO, d=10M, T=50: peak RSS of the process (MB)", peak, "< 1024", peak < 1024, f"{seconds:.0f}s")


def p6_bookkeeping(root: Path, repeats: int) -> None:
    """What the runner does per request besides fitting and scoring, timed at every t of a T = 100 stream.

    The rows carry every key a real row has (a 100-long history row, an oracle and a single-shot
    side), so a file rewritten per request would show as a ratio of about 10.
    """
    from unlearnbench.console import Reporter
    from unlearnbench.loggers import open_run_logger
    from unlearnbench.training import build_model

    T, window = 100, range(6, 16)
    runner = Runner.from_config(_config(root, requests=T, stream="random", size=0.005), Reporter(quiet=True))
    runner.method.attach(build_model("smallcnn", runner.dataset), runner.dataset.num_classes)
    state = runner.method.resume_state()
    scores = {key: 50.0 for key in METRIC_KEYS}
    ratios = []
    for repeat in range(repeats):
        run_dir = RunDirectory(root / f"p6-{repeat}")
        run_dir.initialize(runner.identity, runner.stream.manifest(), runner.train_labels, runner.test_labels)
        logger = open_run_logger("csv", run_dir.path, runner.identity, run_dir.path.name)
        seconds = {}
        for t in range(1, T + 1):
            start = time.perf_counter()
            request = runner.stream.select(t)
            row = RequestRecord(t, "ok", request.forget_classes, scores | {"history": [50.0] * T}, scores, scores)
            run_dir.save_state(t, state)
            run_dir.append_row(row)
            logger.log_request(row)
            run_dir.drop_states_before(t)
            runner.reporter.request(row, T)
            seconds[t] = time.perf_counter() - start
        logger.finish()
        late = statistics.median(seconds[t] for t in range(T - len(window) + 1, T + 1))
        ratios.append(late / statistics.median(seconds[t] for t in window))
    ratio = statistics.median(ratios)
    spread = f"repeats {min(ratios):.2f}..{max(ratios):.2f}"
    report("P6", "per-request bookkeeping at t=100 / at t=10 (T=100)", ratio, "<= 1.20", ratio <= 1.20, spread)


#: The published leaderboard's suite (324 cells): S4 refuses a setting added after it.
PUBLISHED_SUITE = Path(__file__).resolve().parent / "fashionmnist_mlp.yaml"
MEMORIZING_TIER = {
    "dataset": "fashionmnist",
    "dataset_args": {"train_size": 10_000, "test_size": 2_000, "augment": False},
    "stream": "random",
    "size": 0.01,
    "requests": 1,
}


def _bare_tensor_fit(model: torch.nn.Module, images, labels, indices, hp, epochs: int, cosine: bool) -> float:
    """SGD (with the recipe's cosine schedule where `cosine`) over `indices` of in-memory tensors, shuffled per epoch
    by a seeded generator; returns its wall seconds."""
    start = time.perf_counter()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs) if cosine else None
    generator = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for idx in indices[torch.randperm(len(indices), generator=generator)].split(hp.batch_size):
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if schedule is not None:
            schedule.step()
    return time.perf_counter() - start


def _p7_pretraining(root: Path, key: str, arch: str, arch_args: dict, epochs: int, repeats: int) -> Runner:
    from unlearnbench.training import build_model, train_from_scratch

    runner = Runner.from_config(_config(root / key, arch=arch, arch_args=arch_args, **MEMORIZING_TIER))
    dataset, recipe = runner.dataset, replace(runner.recipe, epochs=epochs)
    images, labels = dataset.train.normalized(dataset.mean, dataset.std), dataset.train.labels
    everything = torch.arange(len(labels))
    make_trainer = partial(runner.trainer, label="pretraining")

    def ours(_repeat: int) -> float:
        start = time.perf_counter()
        train_from_scratch(dataset, arch, recipe, everything.numpy(), 0, make_trainer, arch_args)
        return time.perf_counter() - start

    def bare(_repeat: int) -> float:
        torch.manual_seed(0)
        model = build_model(arch, dataset, arch_args)
        return _bare_tensor_fit(model, images, labels, everything, recipe, recipe.epochs, cosine=True)

    ratios = _alternating_ratios(ours, bare, repeats)
    ratio = statistics.median(ratios)
    what = f"pretraining {arch}{' pools 2' if arch_args else ''}, {epochs} epoch(s): runner / bare loop"
    report(key, what, ratio, "<= 1.10", ratio <= 1.10, f"repeats {min(ratios):.3f}..{max(ratios):.3f}")
    return runner


def _p7_request(runner: Runner, repeats: int) -> None:
    dataset = runner.dataset
    images, labels = dataset.train.normalized(dataset.mean, dataset.std), dataset.train.labels
    pretrained = runner.trained_model(np.zeros(0, dtype=np.int64), "pretraining")
    state = {name: tensor.clone() for name, tensor in pretrained.state_dict().items()}
    request, hp = runner.stream.select(1), runner.method.optim
    retain = torch.as_tensor(request.retain)

    def ours(_repeat: int) -> float:
        pretrained.load_state_dict(state)
        runner.method.attach(pretrained, dataset.num_classes)
        return runner.serve(request)["rte_s"]

    def bare(_repeat: int) -> float:
        pretrained.load_state_dict(state)
        return _bare_tensor_fit(pretrained, images, labels, retain, hp, hp.epochs, cosine=False)

    ratios = _alternating_ratios(ours, bare, repeats)
    ratio = statistics.median(ratios)
    spread = f"repeats {min(ratios):.3f}..{max(ratios):.3f}"
    report(
        "P7b", f"one FT request on the mlp ({hp.epochs} epochs): runner / bare", ratio, "<= 1.10", ratio <= 1.10, spread
    )


def _plain_trainer(epochs: int) -> L.Trainer:
    """A Lightning Trainer with nothing of the runner's: no callbacks, logger, checkpointing or progress bar."""
    return L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_model_summary=False, enable_progress_bar=False)  # fmt: skip


class _LeastLightningFit(L.LightningModule):
    """The least a step can cost inside Lightning's loop: manual optimization (no closure, no optimization loop) and
    the model's own `backward` and `optimizer.step` (no precision or strategy hooks around them), which a benchmark
    can do and the package cannot (mixed precision and DDP run through those hooks)."""

    def __init__(self, model: torch.nn.Module, recipe):
        super().__init__()
        self.model, self.recipe = model, recipe
        self.automatic_optimization = False

    @staticmethod
    def examples(batch):
        """The examples a step fits: a loader's batch as it comes."""
        return batch

    def training_step(self, batch, batch_idx: int) -> None:
        examples = self.examples(batch)
        self.optimize(F.cross_entropy(self.model(examples.x), examples.y))

    def optimize(self, loss: torch.Tensor) -> None:
        optimizer = self.optimizers().optimizer
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def on_train_epoch_end(self) -> None:
        if self.lr_schedulers() is not None:
            self.lr_schedulers().step()

    def configure_optimizers(self):
        from unlearnbench.training import recipe_optimization

        return recipe_optimization(self.model.parameters(), self.recipe)


class _ManualLightningFit(_LeastLightningFit):
    """Lightning's documented manual optimization: `manual_backward` and `LightningOptimizer.step`, through the
    precision and strategy hooks that mixed precision and DDP need (what the package could switch its fits to)."""

    def optimize(self, loss: torch.Tensor) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()


class _LeastUnlearningFit(_LeastLightningFit):
    """`_LeastLightningFit` on a stream's batches (`{"retain": Batch}`) with an unlearning fit's settings: SGD, no
    schedule, as P1a's bare loop."""

    @staticmethod
    def examples(batch):
        return batch["retain"]

    def configure_optimizers(self):
        hp = self.recipe
        return torch.optim.SGD(self.model.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)


def _p7_loop_cost(runner: Runner, repeats: int) -> None:
    """What P7a's ratio is made of: the per-step cost of the loop alone, the runner's fit of a near-zero model (784 -> 1
    -> 10, nothing left to compute) against the bare loop's, beside a plain Lightning Trainer (`_plain_trainer`) fitting
    it as the package does, by Lightning's manual optimization (`_ManualLightningFit`) and as `_LeastLightningFit` does:
    Lightning's own loop, not the runner's additions. P7e adds the least loop cost to the bare loop's step of the
    `mlp`: the least P7a can be while Lightning runs the loop."""
    from unlearnbench.training import SupervisedClassifier, build_model

    dataset, recipe = runner.dataset, replace(runner.recipe, epochs=5)
    images, labels = dataset.train.normalized(dataset.mean, dataset.std), dataset.train.labels
    everything = torch.arange(len(labels))
    steps = recipe.epochs * -(-len(labels) // recipe.batch_size)

    def near_zero() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(images[0].numel(), 1), torch.nn.Linear(1, 10))

    def lightning_fit(trainer, module: type[L.LightningModule] = SupervisedClassifier) -> float:
        loader = dataset.loader(dataset.train, everything, recipe.batch_size, augment=True, shuffle=True, seed=0)
        start = time.perf_counter()
        trainer.fit(module(near_zero(), recipe), train_dataloaders=loader)
        return time.perf_counter() - start

    def bare_mlp() -> float:
        torch.manual_seed(0)
        return _bare_tensor_fit(build_model("mlp", dataset), images, labels, everything, recipe, recipe.epochs, True)

    seconds: dict[str, list[float]] = {"runner": [], "plain": [], "manual": [], "least": [], "bare": [], "bare mlp": []}
    for _ in range(repeats):
        seconds["runner"].append(lightning_fit(runner.trainer(recipe.epochs, "pretraining")))
        seconds["plain"].append(lightning_fit(_plain_trainer(recipe.epochs)))
        seconds["manual"].append(lightning_fit(_plain_trainer(recipe.epochs), _ManualLightningFit))
        seconds["least"].append(lightning_fit(_plain_trainer(recipe.epochs), _LeastLightningFit))
        seconds["bare"].append(_bare_tensor_fit(near_zero(), images, labels, everything, recipe, recipe.epochs, True))
        seconds["bare mlp"].append(bare_mlp())
    per_step = {name: 1000 * statistics.median(values) / steps for name, values in seconds.items()}
    detail = ", ".join(f"{name} {ms:.3f}" for name, ms in per_step.items())
    report("P7d", "loop cost, ms a step: runner − bare (near-zero model)", per_step["runner"] - per_step["bare"],
           "report", True, f"ms a step: {detail}")  # fmt: skip
    least_cost = per_step["least"] - per_step["bare"]
    least = (per_step["bare mlp"] + least_cost) / per_step["bare mlp"]
    report("P7e", "least P7a in Lightning's loop: (bare mlp step + least loop cost) / bare", least, "report", True,
           f"least loop cost {least_cost:.3f} ms on a {per_step['bare mlp']:.3f} ms step")  # fmt: skip


def p7_memorizing(root: Path, repeats: int) -> None:
    # `Runner.run` keeps numpy's BLAS on one thread (see there); fits called alone must too.
    with threadpool_limits(limits=1, user_api="blas"):
        runner = _p7_pretraining(root, "P7a", "mlp", {}, 5, repeats)
        _p7_request(runner, repeats)
        _p7_loop_cost(runner, repeats)
        _p7_pretraining(root, "P7c", "smallcnn", {"pools": 2}, 1, repeats)


def p8_together(root: Path, repeats: int) -> None:
    from unlearnbench.training import train_from_scratch, train_together

    runner = Runner.from_config(_config(root / "P8", arch="mlp", **MEMORIZING_TIER))
    recipe, seeds = replace(runner.recipe, epochs=2), list(range(16))
    keep = np.arange(len(runner.train_labels))
    make_trainer = partial(runner.trainer, label="oracles")

    def together(_repeat: int) -> float:
        start = time.perf_counter()
        train_together(runner.dataset, "mlp", recipe, keep, seeds, make_trainer)
        return time.perf_counter() - start

    def lone(_repeat: int) -> float:
        start = time.perf_counter()
        for seed in seeds:
            train_from_scratch(runner.dataset, "mlp", recipe, keep, seed, make_trainer)
        return time.perf_counter() - start

    lone_seconds = []

    def timed_lone(repeat: int) -> float:
        lone_seconds.append(lone(repeat))
        return lone_seconds[-1]

    ratios = _alternating_ratios(together, timed_lone, repeats)
    ratio = statistics.median(ratios)
    spread = f"repeats {min(ratios):.3f}..{max(ratios):.3f}, {torch.get_num_threads()} threads"
    report("P8", "16 mlp oracles: one batched fit / 16 lone fits", ratio, "<= 0.50", ratio <= 0.5, spread)
    _p8_bound(runner, recipe, len(keep), len(seeds), statistics.median(lone_seconds))


def _p8_bound(runner: Runner, recipe, samples: int, fits: int, lone_seconds: float) -> None:
    """The least P8 can be: a batched fit still does the K models' arithmetic. Each model has its own weights, so
    its products stay as small as a lone fit's (batch x width), and a batch of K of them (`torch.bmm`) runs at the
    rate those shapes allow, not at a large product's; and each model's weights take the recipe's SGD step (momentum
    and weight decay: a few passes over K x 0.5M floats a step, as in the lone fits). Timed here: the K models'
    forward and backward passes as stacked `bmm`s on random tensors, then the recipe's SGD step on the stacked
    weights, nothing else (no data or loop), for the lone fits' number of steps; over the lone fits' measured time
    it is the ratio a batched fit without any other cost would reach. The products alone are reported beside it."""
    from unlearnbench.training import build_model, recipe_optimization

    model = build_model("mlp", runner.dataset, None)
    layers = [layer for layer in model.modules() if isinstance(layer, torch.nn.Linear)]
    weights = [torch.randn(fits, layer.out_features, layer.in_features, requires_grad=True) for layer in layers]
    biases = [torch.randn(fits, 1, layer.out_features, requires_grad=True) for layer in layers]
    optimizer = recipe_optimization([*weights, *biases], recipe)["optimizer"]
    images = torch.randn(fits, recipe.batch_size, layers[0].in_features)
    labels = torch.randint(0, layers[-1].out_features, (fits * recipe.batch_size,))

    def products() -> None:
        optimizer.zero_grad()
        features = images
        for k, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
            features = torch.baddbmm(bias, features, weight.transpose(1, 2))
            features = torch.relu(features) if k < len(weights) - 1 else features
        torch.nn.functional.cross_entropy(features.reshape(len(labels), -1), labels).backward()

    def timed(step, steps: int) -> float:
        step()  # warm-up
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - start

    steps = recipe.epochs * -(-samples // recipe.batch_size)
    arithmetic = timed(products, steps)
    updated = timed(lambda: (products(), optimizer.step()), steps)
    macs = sum(layer.in_features * layer.out_features for layer in layers)
    rate = 6 * macs * recipe.batch_size * fits * steps / arithmetic / 1e9
    detail = (
        f"{updated:.1f}s of stacked products and SGD steps against {lone_seconds:.1f}s of lone fits; the products "
        f"alone {arithmetic:.1f}s ({rate:.0f} GFLOP/s), {arithmetic / lone_seconds:.3f} of them"
    )
    report("P8b", "least P8 possible: the K fits' arithmetic batched / lone fits", updated / lone_seconds,
           "report", True, detail)  # fmt: skip


def p10_sample_gradients(repeats: int) -> None:
    from unlearnbench.data.base import Batch
    from unlearnbench.methods import gradients
    from unlearnbench.methods.sample_gradients import (
        SampleGradients,
        fisher_diagonal,
        sample_gradients,
        woodfisher_inverse_product,
    )
    from unlearnbench.registry import ARCHS

    torch.manual_seed(0)
    model = ARCHS.get("mlp")(num_classes=10, in_channels=1, input_size=28).eval()
    images, labels = torch.randn(1024, 1, 28, 28), torch.randint(0, 10, (1024,))
    batches = [Batch(images[i : i + 64], labels[i : i + 64], torch.arange(i, i + 64)) for i in range(0, 1024, 64)]
    vector = torch.randn(sum(p.numel() for p in model.parameters()))

    def factored_product() -> None:
        woodfisher_inverse_product(
            SampleGradients.cat([sample_gradients(model, b.x, b.y) for b in batches]), vector, 1024
        )

    def materialized_product() -> None:
        dense = torch.cat([gradients.flat(gradients.per_sample_gradients(model, b.x, b.y)) for b in batches])
        gradients.inverse_fisher_product(dense, vector, 1024)

    def timed(statistic):
        def measure(_repeat: int) -> float:
            start = time.perf_counter()
            statistic()
            return time.perf_counter() - start

        return measure

    rows = (
        (
            "P10a",
            "Fisher diagonal",
            partial(fisher_diagonal, model, batches),
            partial(gradients.diagonal_fisher, model, batches),
        ),
        ("P10b", "IU's H⁻¹v", factored_product, materialized_product),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            for key, what, factored, materialized in rows:
                ratios = _alternating_ratios(timed(factored), timed(materialized), repeats)
                ratio = statistics.median(ratios)
                spread = f"repeats {min(ratios):.3f}..{max(ratios):.3f}"
                report(key, f"{what}, 1,024 samples: factored / torch.func", ratio, "<= 0.10", ratio <= 0.1, spread)
    finally:
        torch.set_num_threads(threads)


#: P9's suite: `cells` FT runs of the memorizing tier's `mlp`, T = 2 class-wise, one epoch a fit, which differ only in
#: lr (one memory profile each), all on the one pretrained model and its oracles (trained by the warm-up suite).
P9_SUITE = """
import sys
from pathlib import Path
from unlearnbench.suite import run_suite
root, cells = Path(sys.argv[1]), int(sys.argv[2])
common = {"dataset": "fashionmnist", "dataset_args": {"train_size": 10000, "test_size": 2000, "augment": False},
          "arch": "mlp", "requests": 2, "recipe": {"epochs": 1}, "logger": "csv", "accelerator": "cpu"}
methods = [{"finetune": {"optim": {"epochs": 1, "lr": 0.01 + k / 1000}}} for k in range(cells)]
run_suite({"out": str(root / f"cells{cells}"), "store": str(root / "store"), "common": common, "methods": methods,
           "streams": [{"stream": "classwise", "size": 1}], "leaderboard": False})
status = Path("/proc/self/status").read_text().splitlines()
print(int(next(line for line in status if line.startswith("VmHWM")).split()[1]) / 1024)
"""


P9_TUNE = """
import sys
from pathlib import Path
from unlearnbench.cli import main
root, trials = Path(sys.argv[1]), sys.argv[2]
try:
    main(["tune", "--method", "finetune", "--dataset", "fashionmnist", "--arch", "mlp", "--dataset_args",
          '{"train_size": 10000, "test_size": 2000, "augment": false}', "--requests", "2", "--recipe", '{"epochs": 1}',
          "--trials", trials, "--tune_seeds", "100", "--out", str(root / f"trials{trials}"), "--store",
          str(root / "store"), "--accelerator", "cpu", "--quiet", "true"])
except SystemExit as stop:
    assert not stop.code, stop.code
status = Path("/proc/self/status").read_text().splitlines()
print(int(next(line for line in status if line.startswith("VmHWM")).split()[1]) / 1024)
"""


def _peak_rss_mb(script: str, *args: str) -> float:
    """The peak RSS (MB) of a fresh Python process running `script` with `args`."""
    command = [sys.executable, "-c", script, *args]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()[-1])


def p9_suite_memory(root: Path) -> None:
    """A suite's memory does not grow with its cells: the peak RSS of a suite of 16 cells minus that of 4, per extra
    cell. Each cell's runner, with its method, models, Trainers and data views, is freed when the cell is done,
    reference cycles included (about 12 MB a cell here, kept to the end of the suite or to a rare full collection,
    they grew a 27-cell suite from 1.8 to 3.7 GB). P9b: a tune study's trials likewise (52 MB a trial before the
    collection after each trial)."""

    def peak(cells: int) -> float:
        return _peak_rss_mb(P9_SUITE, str(root / "p9"), str(cells))

    peak(1)  # warm-up: trains the pretrained model and its oracles into the shared store
    small, large = peak(4), peak(16)
    per_cell = (large - small) / 12
    detail = f"peak {small:.0f} MB at 4 cells, {large:.0f} MB at 16"
    report("P9", "suite peak RSS growth per cell, memorizing tier (MB)", per_cell, "<= 2", per_cell <= 2, detail)

    def tune_peak(trials: int) -> float:
        return _peak_rss_mb(P9_TUNE, str(root / "p9b"), str(trials))

    tune_peak(1)  # warm-up: the tuning stream's pretrained model and oracles into the shared store
    small, large = tune_peak(4), tune_peak(16)
    per_trial = (large - small) / 12
    detail = f"peak {small:.0f} MB at 4 trials, {large:.0f} MB at 16"
    report("P9b", "tune peak RSS growth per trial, memorizing tier (MB)", per_trial, "<= 2", per_trial <= 2, detail)


def startup() -> None:
    for key, argv in (("S1", ["--help"]), ("S2", ["list"]), ("S5", ["tune", "--help"])):
        best = _wall_seconds(argv)
        report(key, f"`unlearnbench {' '.join(argv)}` wall seconds", best, "< 1.5 s", best < 1.5)


def _wall_seconds(argv: list[str], expected_code: int = 0) -> float:
    """The best of 3 wall times of `python -m unlearnbench.cli ARGV`, which must exit `expected_code`."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "unlearnbench.cli", *argv], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        assert result.returncode == expected_code, (argv, result.stderr[-2000:])
    return min(times)


def refusals(root: Path) -> None:
    """S3, S4: bad input to `run`, `suite` and `tune` is refused before torch and Lightning are imported
    (`unlearnbench.early_checks`, `unlearnbench.grid`)."""
    (root / "bad.yaml").write_text("requests: [1\n")
    (root / "section.yaml").write_text("method: salun\nsalun: {ratio: 3}\n")
    (root / "scalar.yaml").write_text("method: salun\nsalun: 3\n")
    cases = {
        "unknown method": ["run", "--method", "nosuch"],
        "--requests 0": ["run", "--method", "finetune", "--requests", "0"],
        "bad config": ["run", "--method", "finetune", "--config", str(root / "bad.yaml")],
        "missing --data-dir": ["run", "--method", "finetune", "--data-dir", str(root / "nowhere")],
        "misspelt option": ["run", "--method", "finetune", "--request", "2"],
        "wrong type": ["run", "--method", "finetune", "--requests", "two"],
        "unknown --oracle": ["run", "--method", "finetune", "--oracle", "sometimes"],
        "bad --recipe": ["run", "--method", "finetune", "--recipe", '{"epochs": -1}'],
        "method argument out of range": ["run", "--method", "salun", "--salun.ratio", "2"],
        "optimizer setting out of range": ["run", "--method", "salun", "--salun.optim.lr", "-1"],
        "unknown method argument": ["run", "--method", "salun", "--salun.nope", "1"],
        "guard argument of the wrong type": ["run", "--method", "finetune", "--guard", "ewc", "--ewc.ewc_lambda", "x"],
        "dataset subset too small": ["run", "--method", "finetune", "--dataset_args.test_size", "1"],
        "arch argument < 1": ["run", "--method", "finetune", "--arch_args.width", "0"],
        "method group given whole": ["run", "--method", "salun", "--salun", '{"ratio": 3}'],
        "config section out of range": ["run", "--config", str(root / "section.yaml")],
        "config section no mapping": ["run", "--config", str(root / "scalar.yaml")],
        "stream longer than the classes": ["run", "--method", "finetune", "--requests", "11"],
        "unknown --accelerator": ["run", "--method", "finetune", "--accelerator", "tpuu"],
        "unknown --strategy": ["run", "--method", "finetune", "--strategy", "nope"],
        "unknown --precision": ["run", "--method", "finetune", "--precision", "99"],
    }
    _report_refusals("S3", "run", cases)
    (root / "unknown.yaml").write_text(f"out: {root / 'out'}\nmethods: [nosuch]\n")
    (root / "zero.yaml").write_text(f"out: {root / 'out'}\nmethods: [finetune]\ncommon: {{requests: 0}}\n")
    published = yaml.safe_load(PUBLISHED_SUITE.read_text())  # its 324 cells, then a setting that is refused
    published |= {"out": str(root / "out"), "settings": [*published["settings"], {"oracle_every": 0}]}
    (root / "last.yaml").write_text(yaml.safe_dump(published))
    cases = {
        "suite unknown method": ["suite", str(root / "unknown.yaml")],
        "published suite, cell 325 bad": ["suite", str(root / "last.yaml")],
        "suite requests: 0": ["suite", str(root / "zero.yaml")],
        "suite not YAML": ["suite", str(root / "bad.yaml")],
        "tune unknown method": ["tune", "--method", "nosuch"],
        "tune --requests 0": ["tune", "--method", "finetune", "--requests", "0"],
        "tune suite unknown method": ["tune", "--suite", str(root / "unknown.yaml")],
        "tune misspelt option": ["tune", "--method", "finetune", "--trial", "3"],
        "tune unknown objective": ["tune", "--method", "finetune", "--objective", "best"],
        "tune unknown --accelerator": ["tune", "--method", "finetune", "--accelerator", "tpuu"],
        "tune stream longer than the classes": ["tune", "--method", "finetune", "--requests", "11"],
    }
    _report_refusals("S4", "suite` or `tune", cases)


def _report_refusals(key: str, command: str, cases: dict[str, list[str]]) -> None:
    """The slowest of `cases` (each refused, exit code 2) against the import of the runner beside it."""
    seconds = {what: _wall_seconds(argv, expected_code=2) for what, argv in cases.items()}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import unlearnbench.runner"], check=True)
    imports = time.perf_counter() - start
    worst = max(seconds.values())
    detail = ", ".join(f"{what} {value:.2f}" for what, value in seconds.items())
    report(
        key,
        f"slowest refused `{command}` wall seconds",
        worst,
        "< 2 s",
        worst < 2,
        f"{detail}; runner import {imports:.2f}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/out/perf.json"))
    parser.add_argument("--only", nargs="*", default=None, help="rows to measure, e.g. P6 (default: every row)")
    args = parser.parse_args()
    rows = {
        "S": lambda root: (startup(), refusals(root)),
        "P1": lambda root: (p1_fit(root, args.repeats), p1_run(root, args.repeats)),
        "P2": lambda root: p2_eval(root, args.repeats),
        "P3": p3_suite,
        "P4": p4_loft,
        "P5": lambda root: p5_geometry(),
        "P6": lambda root: p6_bookkeeping(root, args.repeats),
        "P7": lambda root: p7_memorizing(root, args.repeats),
        "P8": lambda root: p8_together(root, args.repeats),
        "P9": p9_suite_memory,
        "P10": lambda root: p10_sample_gradients(args.repeats),
    }
    print(f"{'key':4} {'measure':58} {'value':>9}  {'target':9} result")
    with tempfile.TemporaryDirectory() as folder:
        for key, measure in rows.items():
            if args.only is None or key in args.only:
                measure(Path(folder))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(ROWS, indent=1))
    return 0 if all(row["pass"] for row in ROWS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
