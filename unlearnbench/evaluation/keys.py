"""Every published number, with its direction (as torchmetrics' `higher_is_better`) and its target.

For an unlearning method the target of most keys is the oracle (the retrained model), not an
extreme: forgetting accuracy of 0 on a random forget set is as suspicious as 100.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricKey:
    key: str
    description: str
    higher_is_better: bool
    oracle_is_target: bool

    @property
    def arrow(self) -> str:
        arrow = "↑" if self.higher_is_better else "↓"
        return f"{arrow}→oracle" if self.oracle_is_target else arrow


METRIC_KEYS: dict[str, MetricKey] = {
    m.key: m
    for m in (
        MetricKey("forget_acc", "accuracy (%) on F_t, the current forget set", False, True),
        MetricKey("forget_test_acc", "accuracy (%) on test samples of all forgotten classes", False, True),
        MetricKey("retain_acc", "accuracy (%) on the retain set", True, True),
        MetricKey("test_acc", "accuracy (%) on test samples of retained classes (all test if random)", True, True),
        MetricKey("mia_member_rate", "% of F_t an SVC membership attack calls member", False, True),
        MetricKey("gap", "mean |method − oracle| over the accuracy and MIA keys", False, False),
        MetricKey("rte_s", "wall seconds of the unlearning itself, evaluation excluded", False, False),
        MetricKey("prepare_s", "wall seconds of per-request preparation (masks, teachers, features)", False, False),
    )
}

#: Keys the Avg.Gap averages over (forget_test_acc joins for class-wise streams).
GAP_KEYS = ("forget_acc", "retain_acc", "test_acc", "mia_member_rate", "forget_test_acc")
