"""Optimizer steps one request gets, for every registered method at its defaults, in one setting.

    python benchmarks/steps.py [run options] [--methods a,b] [--json FILE]
    python benchmarks/steps.py --suite benchmarks/fashionmnist_mlp.yaml [--methods a,b] [--json FILE] [--store DIR]

The run options are `unlearnbench run`'s, read by its own parser (`--dataset fashionmnist
--dataset.train_size 10000 --arch mlp --stream random --size 0.01 --requests 10 --store DIR`), so
a dataset's or an arch's own arguments pass as they do there; `--suite FILE` takes each (setting,
stream) of a suite file instead, at its first seed, every method at its defaults and without guards.

Each method serves request 1 from the pretrained model through the runner's own path
(`Runner.fit_request`: the method's `prepare`, then its `unlearn`, whose fits are Lightning's), and
every `torch.optim.Optimizer.step` taken meanwhile is counted by a global step hook. Counted, not
computed from a formula, so several fits (RUM's stages, UNSIR's impair and repair), manual
optimization (SCRUB, MUNBa and SFR-on step in `manual_step`, some more than once per batch) and
optimizers of a method's own (LOFT's subspace, UNSIR's noise) come out right. A step of an
optimizer over the model's weights is a model step; any other is listed by its optimizer. Gradient
steps on inputs taken without an optimizer (L2UL's PGD, Boundary Shrink's FGSM) are not counted.

Columns: the budget as the method's hyperparameters state it (epochs, steps, ...; a staged
method's per stage), |F| and |R| of request 1, the Lightning fits and the batches their loops
served, model steps, other steps, and the wall and CPU seconds (process time, every thread) of
prepare + unlearning. Only the pretrained model is written (to the model store, as `run` would).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lightning.pytorch.callbacks import Callback
from threadpoolctl import threadpool_limits
from torch.optim.optimizer import register_optimizer_step_post_hook

warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

from unlearnbench.cli import parse_run_args, run_config  # noqa: E402
from unlearnbench.config import RunConfig  # noqa: E402
from unlearnbench.data.cache import DatasetCache  # noqa: E402
from unlearnbench.errors import ConfigError  # noqa: E402
from unlearnbench.grid import load_suite  # noqa: E402
from unlearnbench.plan import suite_grid  # noqa: E402
from unlearnbench.ranges import groups, paths  # noqa: E402
from unlearnbench.registry import METHODS  # noqa: E402
from unlearnbench.runner import Runner  # noqa: E402

#: Hyperparameters that state a method's budget, as its reference states it.
BUDGET_KEYS = ("optim.epochs", "steps", "msteps", "noise_steps", "pgd_iters")


@dataclass(frozen=True)
class StepCount:
    """What request 1 cost one method: its stated budget, the set sizes, and the steps actually taken."""

    method: str
    budget: str
    forget: int
    retain: int
    fits: int
    batches: int
    model_steps: int
    other_steps: dict[str, int] = field(default_factory=dict)  # optimizer class -> steps
    wall_s: float = 0.0
    cpu_s: float = 0.0
    refused: str | None = None  # the one line a run of this method in this setting is refused with


class FitCounter(Callback):
    """The Lightning fits started and the training batches their loops served."""

    def __init__(self) -> None:
        self.fits = self.batches = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.fits += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches += 1


class CountingRunner(Runner):
    """A `Runner` whose every Trainer also carries `counter`."""

    def __init__(self, plan, reporter=None, datasets: DatasetCache | None = None):
        self.counter = FitCounter()
        super().__init__(plan, reporter, datasets)

    def trainer(self, epochs: int, label: str, callbacks: tuple = (), logger=False):
        return super().trainer(epochs, label, (*callbacks, self.counter), logger)


def budget(method) -> str:
    """The method's budget hyperparameters (`epochs 10`); a staged method's per stage; `—` for none."""
    stages = getattr(method, "stages", None)
    if stages is not None:
        names = method.hparams["stages"]
        return " + ".join(
            f"{name}: {budget(stage) if stage else '—'}" for name, stage in zip(names, stages, strict=True)
        )
    hparams = paths(method.hparams, groups(type(method)))
    return ", ".join(f"{key} {hparams[key]}" for key in BUDGET_KEYS if key in hparams) or "—"


def request_steps(config: RunConfig, datasets: DatasetCache | None = None) -> StepCount:
    """Request 1 of `config` served by its method from the pretrained model, its optimizer steps counted."""
    try:
        runner = CountingRunner.from_config(config, datasets=datasets)
    except ConfigError as error:
        return StepCount(config.method.name, "—", 0, 0, 0, 0, 0, refused=str(error))
    method = runner.method.attach(runner.pretrained_model(), runner.dataset.num_classes).to(runner.eval_device)
    request = runner.stream.select(1)
    steps: Counter[str] = Counter()

    def count(optimizer, args, kwargs) -> None:
        weights = {id(p) for p in method.model.parameters()}  # now: a method may swap a layer (Boundary Expanding)
        on_model = any(id(p) in weights for group in optimizer.param_groups for p in group["params"])
        steps["model" if on_model else type(optimizer).__name__] += 1

    runner.counter.fits = runner.counter.batches = 0
    hook = register_optimizer_step_post_hook(count)
    try:
        with threadpool_limits(limits=1, user_api="blas"):  # as `Runner.run`
            wall, cpu = time.perf_counter(), time.process_time()
            runner.fit_request(method, runner.guards, request, "steps", logged=False)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        hook.remove()
    model_steps = steps.pop("model", 0)
    return StepCount(
        config.method.name,
        budget(method),
        len(request.forget),
        len(request.retain),
        runner.counter.fits,
        runner.counter.batches,
        model_steps,
        dict(steps),
        wall,
        cpu,
    )


def setting_configs(suite: Path | None, run_options: list[str], store: Path | None) -> list[RunConfig]:
    """One config per setting: the run options (`unlearnbench run`'s parser), or each (setting, stream) of a suite."""
    if suite is None:
        stored = [] if store is None else ["--store", str(store)]
        return [run_config(parse_run_args(["--method", METHODS.names()[0], *run_options, *stored]))]
    if run_options:
        raise ConfigError(f"with --suite the settings are the file's; run options {' '.join(run_options)} do not apply")
    cells = suite_grid(load_suite(suite))
    first = [cell.config for cell in cells if cell.position[2:] == (1, 1)]  # first seed, first method
    return [config.replace(guards=[], guard_args={}, store=store or config.output.store) for config in first]


def table(counts: list[StepCount]) -> str:
    lines = [
        "| method | budget | F | R | fits | batches | model steps | other steps | wall s | CPU s |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for c in counts:
        if c.refused:
            lines.append(f"| {c.method} | refused: {c.refused} | | | | | | | | |")
            continue
        other = ", ".join(f"{n} {name}" for name, n in c.other_steps.items()) or "—"
        lines.append(
            f"| {c.method} | {c.budget} | {c.forget} | {c.retain} | {c.fits} | {c.batches} | {c.model_steps} | "
            f"{other} | {c.wall_s:.1f} | {c.cpu_s:.1f} |"
        )
    return "\n".join(lines)


def describe(config: RunConfig) -> str:
    given = {**config.data.args, **config.arch.args}
    args = "".join(f" {key}={value}" for key, value in given.items() if value is not None)
    dataset, arch, stream = config.setting
    size = "" if config.stream.size is None else f", size {config.stream.size}"
    return f"{dataset}/{arch}{args}, {stream}{size}, T = {config.stream.requests}, seed {config.seeds.seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", help="comma-separated method names (default: every registered method)")
    parser.add_argument("--suite", type=Path, help="a suite file: each of its (setting, stream) in turn")
    parser.add_argument("--json", type=Path, help="also write the counts as JSON here")
    parser.add_argument("--store", type=Path, help="model store of the pretrained models (default: the setting's)")
    args, run_options = parser.parse_known_args(argv)
    methods = args.methods.split(",") if args.methods else METHODS.names()
    try:
        configs = setting_configs(args.suite, run_options, args.store)
        unknown = [name for name in methods if name not in METHODS]
        if unknown:
            raise ConfigError(f"unknown method(s) {', '.join(unknown)}; choose from: {', '.join(METHODS.names())}")
    except ConfigError as error:
        print(f"steps.py: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    datasets, results = DatasetCache(), []
    for config in configs:
        counts = [request_steps(config.replace(method=name, method_args={}), datasets) for name in methods]
        print(f"\n{describe(config)}: request 1\n\n{table(counts)}", flush=True)
        results.append({"setting": describe(config), "counts": [asdict(c) for c in counts]})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
