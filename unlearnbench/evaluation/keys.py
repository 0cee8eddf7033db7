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
    #: A diagnostic (update geometry) has no better direction; `higher_is_better` is then meaningless.
    diagnostic: bool = False

    @property
    def arrow(self) -> str:
        if self.diagnostic:
            return "·"
        arrow = "↑" if self.higher_is_better else "↓"
        return f"{arrow}→oracle" if self.oracle_is_target else arrow


#: Ranks of the energy ratios: r = 1, 2, 3 and the rank holding 90% of the energy.
_RS = ("r1", "r2", "r3", "r90")

METRIC_KEYS: dict[str, MetricKey] = {
    m.key: m
    for m in (
        MetricKey("forget_acc", "accuracy (%) on F_t, the current forget set", False, True),
        MetricKey("forget_test_acc", "accuracy (%) on test samples of all forgotten classes", False, True),
        MetricKey("retain_acc", "accuracy (%) on the retain set", True, True),
        MetricKey("test_acc", "accuracy (%) on test samples of retained classes (all test if random)", True, True),
        MetricKey("mia_member_rate", "% of F_t an SVC membership attack calls member", False, True),
        MetricKey("mia_validity", "SVC attack's balanced accuracy (%), retain vs test, held-out half", True, False),
        MetricKey("mia_validity_lo", "lower end of its 95% binomial interval (n.s. if ≤ 50 ≤ hi)", True, False),
        MetricKey("mia_validity_hi", "upper end of its 95% binomial interval", True, False),
        MetricKey("mia_advantage", "SVC member rate on F_t − on unseen samples of its classes", False, True),
        MetricKey("gap", "Avg.Gap of the papers: mean |method − oracle| over accuracy and MIA keys", False, False),
        MetricKey("gap_acc", "mean |method − oracle| over the accuracy keys only (headline)", False, False),
        MetricKey(
            "forward_gain",
            "forget_acc on F_t, continual − the same method serving F_t single-shot (forward failure)",
            False,
            True,
        ),
        MetricKey("rte_s", "wall seconds of the unlearning itself, evaluation excluded", False, False),
        MetricKey("prepare_s", "wall seconds of per-request preparation (masks, teachers, features)", False, False),
        # Oracle-calibrated confidence attack (evaluation/oracle_mia.py): the oracle's value is chance, 0.5.
        MetricKey("lira_auc", "AUC of φ_method − φ_oracle (LiRA's statistic, one OUT model), F_t vs test", False, True),
        MetricKey("lira_tpr_at_1fpr", "% of F_t flagged at 1% false positives (None under 100 negatives)", False, True),
        MetricKey("phi_auc", "AUC of raw logit-confidence φ, F_t vs test non-members (no reference)", False, True),
        MetricKey("phi_retain_auc", "AUC of raw φ, retain vs test: how visible true membership is", False, True),
        # Privacy numbers that compare models (evaluation/privacy.py); the oracle's RMIA value is chance, 0.5.
        MetricKey(
            "rmia_auc", "AUC of offline RMIA (oracles as OUT references, test as population), F_t vs test", False, True
        ),
        MetricKey(
            "rmia_tpr_at_1fpr", "% of F_t RMIA flags at 1% false positives (None under 100 negatives)", False, True
        ),
        MetricKey(
            "tow", "ToW: product over forget/retain/test of (1 − |acc − oracle's| / 100); 1 = the oracle", True, False
        ),
        MetricKey("tow_mia", "ToW with the SVC member rate in place of the forget accuracy", True, False),
        MetricKey(
            "eps_forget_score", "NeurIPS-2023 forget score F over N chains vs N oracles; ~1 = the oracles", True, False
        ),
        MetricKey("eps_score", "F · (RA / RA_oracles) · (TA / TA_oracles), the challenge's final score", True, False),
        *(
            MetricKey(f"{auc}_null_{end}", f"{side} of the 95% permutation null band of {auc}", False, False, True)
            for auc in ("lira_auc", "rmia_auc", "phi_auc", "phi_retain_auc")
            for end, side in (("lo", "low end"), ("hi", "high end"))
        ),
        # Update geometry (evaluation/geometry.py), basis = updates u_1..u_t so far: diagnostics.
        MetricKey("update_norm", "‖u_t‖, L2 norm of θ_t − θ_{t−1} over trainable parameters", False, False, True),
        *(
            MetricKey(f"er_{r}", f"ER_t: share of ‖u_t‖² in the top-{r} directions of U", False, False, True)
            for r in _RS
        ),
        MetricKey("r90", "number of singular directions holding 90% of ‖U‖_F²", False, False, True),
        *(
            MetricKey(f"co_{i}", f"CO_t: u_t on left singular vector {i} (sign-fixed)", False, False, True)
            for i in (1, 2, 3)
        ),
        *(MetricKey(f"er_online_{r}", f"ER_t, top-{r} basis of u_1..u_(t−1) only", False, False, True) for r in _RS),
        MetricKey("r90_online", "r90 of the basis u_1..u_(t−1)", False, False, True),
        MetricKey("cos_prev", "cosine between u_t and u_(t−1)", False, False, True),
    )
}

#: Keys the Avg.Gap averages over (forget_test_acc joins for class-wise streams).
GAP_KEYS = ("forget_acc", "retain_acc", "test_acc", "mia_member_rate", "forget_test_acc")
#: `gap_acc`: the accuracy keys alone. The SVC member rate is left out because on well-fit data it
#: re-measures confident correctness (see evaluation/mia.py): it made 1.79 of a 1.93 Avg.Gap.
GAP_ACC_KEYS = ("forget_acc", "retain_acc", "test_acc", "forget_test_acc")


def significant(low: float | None, high: float | None) -> bool:
    """False when the SVC validity interval (%) contains chance, 50: the attack's numbers carry no signal."""
    return low is not None and high is not None and not (low <= 50.0 <= high)
