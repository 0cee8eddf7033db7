"""Every published number, with its direction (as torchmetrics' `higher_is_better`) and its target.

For an unlearning method the target of most keys is the oracle (the retrained model), not an
extreme: forgetting accuracy of 0 on a random forget set is as suspicious as 100.

`METRIC_KEYS` is the one owner of what a metric is: its direction, its decimals, which gap it
enters, where it is shown (the console's request table, a leaderboard column) and, for a metric
that one model's evaluation logits determine, the function that computes it. The scorer, the
console, the leaderboard, the loggers and the metric table of docs/reporting.md all read it, so a
new metric is one function and one `register_metric` call (docs/extending.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torchmetrics.functional.classification import multiclass_accuracy

from unlearnbench.early_checks import QUANTIZATION_BITS
from unlearnbench.evaluation.quantization import QUANTIZED_METRICS, quantized_key

if TYPE_CHECKING:
    from unlearnbench.evaluation.evaluator import EvalLogits
    from unlearnbench.streams.base import Request

_log = logging.getLogger(__name__)


def accuracy(logits: np.ndarray, labels: np.ndarray, num_classes: int) -> float | None:
    """Top-1 accuracy in percent; None for an empty subset (never a silent 0)."""
    if len(labels) == 0:
        return None
    value = multiclass_accuracy(
        torch.from_numpy(logits), torch.from_numpy(labels), num_classes=num_classes, average="micro"
    )
    return float(value) * 100.0


@dataclass(frozen=True)
class ScoringInputs:
    """What a metric of one model after request t may read: its logits, the labels, the request's index sets."""

    logits: EvalLogits
    train_labels: np.ndarray
    test_labels: np.ndarray
    request: Request
    num_classes: int

    def train_accuracy(self, indices: np.ndarray) -> float | None:
        """Top-1 accuracy (%) on the training samples `indices` (None when there are none)."""
        return accuracy(self.logits.train[indices], self.train_labels[indices], self.num_classes)

    def test_accuracy(self, indices: np.ndarray) -> float | None:
        """Top-1 accuracy (%) on the test samples `indices` (None when there are none)."""
        return accuracy(self.logits.test[indices], self.test_labels[indices], self.num_classes)


#: Which averages of |method − oracle| a metric enters: `gap` is the papers' Avg.Gap, `gap_acc` the headline.
GAP, GAP_ACC = "gap", "gap_acc"


@dataclass(frozen=True)
class MetricKey:
    key: str
    description: str
    higher_is_better: bool
    oracle_is_target: bool
    #: A diagnostic (update geometry) has no better direction; `higher_is_better` is then meaningless.
    diagnostic: bool = False
    #: Decimals of its value in the console, the leaderboard and the docs.
    digits: int = 2
    #: The gap averages it enters (`GAP`, `GAP_ACC`).
    gaps: tuple[str, ...] = ()
    #: A row of the console's table after every request (and a column of its summary table).
    console: bool = False
    #: Its leaderboard column's title (the value after request T, averaged over seeds); None: not a column.
    leaderboard: str | None = None
    #: Computes it for the method and the oracle alike; None where a computation shared with other keys (the SVC
    #: attack, the privacy scores, geometry) or the runner (timings, gaps) writes it.
    compute: Callable[[ScoringInputs], float | None] | None = None
    #: Only defined on class-wise streams (the forget set's classes exist); absent from a random stream's rows.
    class_wise_only: bool = False

    @property
    def arrow(self) -> str:
        if self.diagnostic:
            return "·"
        arrow = "↑" if self.higher_is_better else "↓"
        return f"{arrow}→oracle" if self.oracle_is_target else arrow

    def format(self, value: float | None) -> str:
        return "—" if value is None else f"{value:.{self.digits}f}"


METRIC_KEYS: dict[str, MetricKey] = {}


def register_metric(metric: MetricKey) -> MetricKey:
    """Add `metric` to the registry (its key must be new); returns it."""
    if metric.key in METRIC_KEYS:
        raise ValueError(f"metric {metric.key!r} is already registered")
    METRIC_KEYS[metric.key] = metric
    return metric


def gap_keys(gap: str) -> tuple[str, ...]:
    """The keys averaged by `gap` (`GAP` or `GAP_ACC`), in registry order."""
    return tuple(key for key, metric in METRIC_KEYS.items() if gap in metric.gaps)


#: The keys that time a request (wall and CPU seconds): the only numbers of a row that differ between two runs of one
#: command, so a resumed or repeated run is compared without them.
TIMING_KEYS = ("rte_s", "rte_cpu_s", "prepare_s")


def console_keys() -> tuple[str, ...]:
    return tuple(key for key, metric in METRIC_KEYS.items() if metric.console)


def leaderboard_keys() -> tuple[str, ...]:
    return tuple(key for key, metric in METRIC_KEYS.items() if metric.leaderboard is not None)


def computed_scores(inputs: ScoringInputs) -> dict[str, float | None]:
    """Every metric with a `compute`, in registry order (class-wise-only ones on class-wise streams only)."""
    class_wise = inputs.request.forget_classes is not None
    return {
        key: metric.compute(inputs)
        for key, metric in METRIC_KEYS.items()
        if metric.compute is not None and (class_wise or not metric.class_wise_only)
    }


#: Ranks of the energy ratios: r = 1, 2, 3 and the rank holding 90% of the energy.
_RS = ("r1", "r2", "r3", "r90")

for _metric in (
    MetricKey(
        "forget_acc",
        "accuracy (%) on F_t, the current forget set",
        False,
        True,
        gaps=(GAP, GAP_ACC),
        console=True,
        leaderboard="forget_acc",
        compute=lambda s: s.train_accuracy(s.request.forget),
    ),
    MetricKey(
        "forget_test_acc",
        "accuracy (%) on test samples of all forgotten classes",
        False,
        True,
        gaps=(GAP, GAP_ACC),
        console=True,
        leaderboard="forget_test_acc",
        compute=lambda s: s.test_accuracy(s.request.test_forget),
        class_wise_only=True,
    ),
    MetricKey(
        "retain_acc",
        "accuracy (%) on the retain set",
        True,
        True,
        gaps=(GAP, GAP_ACC),
        console=True,
        leaderboard="retain_acc",
        compute=lambda s: s.train_accuracy(s.request.retain),
    ),
    MetricKey(
        "test_acc",
        "accuracy (%) on test samples of retained classes (all test if random)",
        True,
        True,
        gaps=(GAP, GAP_ACC),
        console=True,
        leaderboard="test_acc",
        compute=lambda s: s.test_accuracy(s.request.test_retain),
    ),
    # The SVC attack (evaluation/mia.py) writes these five together.
    MetricKey(
        "mia_member_rate",
        "% of F_t an SVC membership attack calls member",
        False,
        True,
        gaps=(GAP,),
        console=True,
        leaderboard="mia",
    ),
    MetricKey(
        "mia_validity",
        "SVC attack's balanced accuracy (%), retain vs test, held-out half",
        True,
        False,
        console=True,
        leaderboard="mia_valid",
    ),
    MetricKey("mia_validity_lo", "lower end of its 95% binomial interval (n.s. if ≤ 50 ≤ hi)", True, False),
    MetricKey("mia_validity_hi", "upper end of its 95% binomial interval", True, False),
    MetricKey(
        "mia_advantage",
        "SVC member rate on F_t − on unseen samples of its classes (n.s. inside its permutation null interval)",
        False,
        True,
        console=True,
        leaderboard="mia_adv",
    ),
    MetricKey(
        "mia_advantage_null_lo",
        "low end of its 95% permutation null interval (F_t vs unseen labels)",
        False,
        False,
        True,
    ),
    MetricKey("mia_advantage_null_hi", "high end of its 95% permutation null interval", False, False, True),
    # Oracle-calibrated confidence attack (evaluation/oracle_mia.py): the oracle's value is chance, 0.5.
    MetricKey(
        "lira_auc",
        "AUC of φ_method − φ_oracle (LiRA's statistic, one OUT model), F_t vs test",
        False,
        True,
        console=True,
    ),
    MetricKey("lira_tpr_at_1fpr", "% of F_t flagged at 1% false positives (None under 100 negatives)", False, True),
    MetricKey(
        "lira_auc_ties",
        "share of (F_t, test) pairs the target's φ or the score leaves tied; lira_auc None (degenerate) when they could "
        "put it anywhere across its null band",
        False,
        False,
        True,
    ),
    MetricKey("phi_auc", "AUC of raw logit-confidence φ, F_t vs test non-members (no reference)", False, True),
    MetricKey("phi_retain_auc", "AUC of raw φ, retain vs test: how visible true membership is", False, True),
    # Privacy numbers that compare models (evaluation/privacy.py); the oracle's RMIA value is chance, 0.5.
    MetricKey(
        "rmia_auc",
        "AUC of offline RMIA (oracles as OUT references, test as population), F_t vs test",
        False,
        True,
        console=True,
    ),
    MetricKey("rmia_tpr_at_1fpr", "% of F_t RMIA flags at 1% false positives (None under 100 negatives)", False, True),
    MetricKey(
        "rmia_auc_ties",
        "share of (F_t, test) pairs the target's log p_y or the score leaves tied; rmia_auc None (degenerate) when "
        "they could put it anywhere across its null band",
        False,
        False,
        True,
    ),
    MetricKey(
        "tow",
        "ToW: product over forget/retain/test of (1 − |acc − oracle's| / 100); 1 = identical to its oracle",
        True,
        False,
        console=True,
    ),
    MetricKey("tow_mia", "ToW with the SVC member rate in place of the forget accuracy", True, False),
    MetricKey(
        "tow_oracles", "ToW of one oracle against another (chains only): what retraining itself scores", True, False
    ),
    MetricKey("tow_mia_oracles", "ToW-MIA of one oracle against another (chains only)", True, False),
    MetricKey(
        "eps_forget_score",
        "NeurIPS-2023 forget score F over N chains vs N oracles; target: eps_forget_floor at that N, never 1",
        True,
        True,
    ),
    MetricKey(
        "eps_score", "F · (RA / RA_oracles) · (TA / TA_oracles), the challenge's final score; target as F", True, True
    ),
    MetricKey(
        "eps_forget_floor",
        "F of N oracles against N other oracles (two samples of one distribution): 0.26 at N = 4, 0.19 at N = 8",
        True,
        False,
        True,
    ),
    # Written by the runner: the gaps to the oracle (`gap_acc` leaves the SVC member rate out: on well-fit data it
    # re-measures confident correctness, see evaluation/mia.py, and made 1.79 of a 1.93 Avg.Gap), the gain, timings.
    MetricKey(
        "gap_acc",
        "mean |method − oracle| over the accuracy keys only (headline)",
        False,
        False,
        console=True,
        leaderboard="gap_acc",
    ),
    MetricKey(
        "gap",
        "Avg.Gap of the papers: mean |method − oracle| over accuracy and MIA keys",
        False,
        False,
        console=True,
        leaderboard="gap",
    ),
    MetricKey(
        "forward_gain",
        "forget_acc on F_t, continual − the same method serving F_t as a single task (retain = train minus F_t) "
        "from the pretrained model (forward failure)",
        False,
        True,
        console=True,
    ),
    MetricKey(
        "forward_gain_cumulative",
        "forget_acc on F_t, continual − the same method serving F_t from the pretrained model with request t's "
        "retain set (train minus F_1..F_t; `--single-shot-baseline cumulative`)",
        False,
        True,
    ),
    MetricKey("rte_s", "wall seconds of the unlearning itself, evaluation excluded", False, False, console=True),
    MetricKey(
        "rte_cpu_s",
        "CPU seconds of the unlearning itself (the process's, every thread): unlike rte_s, a loaded machine does not "
        "change it much, so methods are ranked by it",
        False,
        False,
        console=True,
    ),
    MetricKey("prepare_s", "wall seconds of per-request preparation (masks, teachers, features)", False, False),
    *(
        MetricKey(f"{auc}_null_{end}", f"{side} of the 95% permutation null band of {auc}", False, False, True)
        for auc in ("lira_auc", "rmia_auc", "phi_auc", "phi_retain_auc")
        for end, side in (("lo", "low end"), ("hi", "high end"))
    ),
    # The relearning attack (evaluation/relearn.py, `--relearn-every`): the method's and the oracle's copies
    # fine-tuned on part of F_1..F_t, measured on the held-out rest; `relearn_curve` (k = 0..K) is the row's list.
    MetricKey(
        "relearn_steps",
        "relearning attack: steps until the held-out part of F_1..F_t is back within the margin of the original's "
        "accuracy on it (None: not within --relearn-steps; the original: 0)",
        True,
        True,
        digits=0,
        console=True,
        leaderboard="relearn_steps",
    ),
    MetricKey(
        "relearn_ratio",
        "Anamnesis Index: relearn_steps / the oracle's (1: as far from F as never having seen it; 0: F was kept)",
        True,
        True,
        console=True,
        leaderboard="ain",
    ),
    MetricKey(
        "relearn_acc",
        "accuracy (%) on the held-out part of F_1..F_t after --relearn-steps steps of the relearning attack",
        False,
        True,
        console=True,
        leaderboard="relearn_acc",
    ),
    # Interleaved streams (streams/interleaved.py): the method's row only, absent from every other kind's rows.
    MetricKey(
        "age",
        "the model's age at request t: learning steps on newly released train data taken before it (interleaved "
        "streams)",
        False,
        False,
        True,
        digits=0,
        console=True,
    ),
    # Update geometry (evaluation/geometry.py), basis = updates u_1..u_t so far: diagnostics.
    MetricKey("update_norm", "‖u_t‖, L2 norm of θ_t − θ_{t−1} over trainable parameters", False, False, True),
    *(MetricKey(f"er_{r}", f"ER_t: share of ‖u_t‖² in the top-{r} directions of U", False, False, True) for r in _RS),
    MetricKey("r90", "number of singular directions holding 90% of ‖U‖_F²", False, False, True),
    *(
        MetricKey(f"co_{i}", f"CO_t: u_t on left singular vector {i} (sign-fixed)", False, False, True)
        for i in (1, 2, 3)
    ),
    *(MetricKey(f"er_online_{r}", f"ER_t, top-{r} basis of u_1..u_(t−1) only", False, False, True) for r in _RS),
    MetricKey("r90_online", "r90 of the basis u_1..u_(t−1)", False, False, True),
    MetricKey("cos_prev", "cosine between u_t and u_(t−1)", False, False, True),
):
    register_metric(_metric)

# Quantization robustness (evaluation/quantization.py, `--quantize-every`): the accuracies above, of the model with
# its weights rounded per output channel to each bit width.
for _bits in QUANTIZATION_BITS:
    for _key in QUANTIZED_METRICS:
        register_metric(
            MetricKey(
                quantized_key(_bits, _key),
                f"{METRIC_KEYS[_key].description}; weights rounded to {_bits} bits (per channel, RTN)",
                METRIC_KEYS[_key].higher_is_better,
                True,
                console=_key == "forget_acc",
                leaderboard=f"q{_bits}_forget" if _key == "forget_acc" else None,
            )
        )

#: The package's own metrics; any other registered one is a user's (a plugin's, a notebook's).
BUILTIN_METRICS = frozenset(METRIC_KEYS)
#: The entry point group of metric plugins: each names a module that registers its metrics on import, or a `MetricKey`.
METRIC_ENTRY_POINTS = "unlearnbench.metrics"


#: The metric plugins that failed to import in this process: their one-line problems, by entry point name.
BROKEN_METRIC_PLUGINS: dict[str, str] = {}


@functools.cache  # once per process: a suite's cells load the plugins once, and warn of a broken one once
def load_metric_plugins() -> None:
    """Register the metrics of every installed plugin (`[project.entry-points."unlearnbench.metrics"]`).

    Unlike a method, which a run names, every registered metric is computed, so all are loaded before a run is
    planned: the metrics a plugin adds to a gap are part of the run's identity (`user_gap_metrics`). An entry
    point names a module that registers its metrics on import, or a `MetricKey`.

    A plugin that fails to import is one warning line naming it, and is left out: a run made without it computes
    the metrics that load, under the identity they give; a run whose recorded identity names metrics that are not
    loaded is refused where it is found (`rundir.refuse_a_run_missing_metrics`, called by the planner), never redone without them.
    """
    from importlib.metadata import entry_points

    for entry_point in entry_points(group=METRIC_ENTRY_POINTS):
        try:
            loaded = entry_point.load()
        except Exception as error:  # foreign code at import: one line, never a traceback
            detail = " ".join(f"{type(error).__name__}: {error}".split())
            problem = f"metric plugin {entry_point.name!r} ({entry_point.value}) failed to import: {detail}"
            BROKEN_METRIC_PLUGINS[entry_point.name] = problem
            _log.warning(f"{problem}; runs go on without its metrics; fix or uninstall the plugin")
            continue
        if isinstance(loaded, MetricKey) and loaded.key not in METRIC_KEYS:
            register_metric(loaded)


def user_metrics() -> list[MetricKey]:
    """The registered metrics that are not the package's own, in registry order."""
    return [metric for key, metric in METRIC_KEYS.items() if key not in BUILTIN_METRICS]


def user_metric_code() -> list[Callable]:
    """The functions computing the user's metrics: code a run's provenance hashes beside the method's."""
    return [metric.compute for metric in user_metrics() if metric.compute is not None]


def user_gap_metrics() -> dict[str, list[str]] | None:
    """The user's metrics that enter a gap, with the gaps (None: the gaps are the package's own).

    A run's gaps average these beside the built-in keys, so they are part of its identity: a gap defined
    otherwise is another run, never a resume or a leaderboard row mixing two definitions."""
    entering = {metric.key: list(metric.gaps) for metric in user_metrics() if metric.gaps}
    return entering or None


#: The leaderboard's headline column: its first, the one a row is read by.
HEADLINE = "gap_acc"


def metrics_table() -> str:
    """The Markdown table of every registered metric, as docs/reporting.md shows it (a test keeps them equal)."""
    lines = ["| key | direction | gaps | console | leaderboard | meaning |", "|---|---|---|---|---|---|"]
    for metric in METRIC_KEYS.values():
        gaps = ", ".join(metric.gaps) or "—"
        console = "yes" if metric.console else "—"
        column = f"`{metric.leaderboard}`" if metric.leaderboard else "—"
        meaning = metric.description.replace("|", "\\|")  # a bar inside a cell would end it
        lines.append(f"| `{metric.key}` | {metric.arrow} | {gaps} | {console} | {column} | {meaning} |")
    return "\n".join(lines) + "\n"


def significant(low: float | None, high: float | None) -> bool:
    """False when the SVC validity interval (%) contains chance, 50: the attack's numbers carry no signal."""
    return low is not None and high is not None and not (low <= 50.0 <= high)
