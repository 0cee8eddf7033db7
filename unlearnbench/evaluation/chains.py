"""Privacy over K unlearning chains and K oracles, recomputed from their `--save-logits` run directories.

A chain is one run; K chains differ only in `unlearn_seed` (a suite's `unlearn_seeds: K`) and were
run with `--oracle-seeds K --save-logits`, so they share the stream, the pretrained model and the
K oracles of every scheduled request. Per request t this gives the ε score (N = K chains against
the K oracles of t on F_t, `privacy.eps_score`) beside its target at this K, the oracle-versus-
oracle floor `privacy.eps_floor(K)` (`eps_forget_floor`); RMIA (each chain against every one of the K
oracles of t, as a live run with K oracles scores it); and ToW; and the backward-privacy matrices: at every t, the ε forget score and the
mean RMIA AUC of each earlier F_s (s ≤ t) against the oracles of t, which never saw F_1..F_t. A
row of the ε matrix that falls while t grows means forgotten data becomes identifiable again as
later requests are served; the diagonal is the per-request number.

Runs with more oracles than chains (`--oracle-seeds M`, M > K: the live RMIA's references) give the first K of
them, in train-seed order: the train seeds train_seed .. train_seed + K − 1, the oracles `--oracle-seeds K` trains,
so every number here is the one K chains against K oracles define (the ε score's N is one count, its floor
`eps_floor(K)`), whatever M the runs were made with.

Chains are taken in unlearn-seed order (a suite's chain i has unlearn seed seed + i), and every
per-chain list follows it. ToW pairs chain i with oracle i (train seed train_seed + i), as RUM
pairs the model unlearned with seed s with the model retrained with seed s (`privacy` module
docstring); chain 0 meets oracle 0, its row's oracle, so its ToW is its live one. Oracle i's
scores are those the runner gives a row's oracle (`scoring.request_scores`, the row's SVC seed and
protocol), recomputed from its saved logits. `tow_oracles`/`tow_mia_oracles`, the mean ToW of
one oracle against another over the pairs i < j, is what retraining itself scores at this seed
noise: ToW's reachable level, below 1.

A chain whose RMIA is degenerate (`oracle_mia.attack_auc`: its AUC None) is counted in
`rmia_degenerate` and left out of the means; a mean with every chain degenerate is None.

Sparse oracle schedules (`--oracle-every E`: oracles at t = E, 2E, ... and T only). The reference
distribution of every number at t is the oracles of t itself: for F_t, and for an earlier F_s at a
later t, it is the models retrained without F_1..F_t (an oracle of an earlier request s still saw
F_{s+1}..F_t, so it is not a model that never saw what the chains have forgotten by t, and no
oracle of a later request is saved at t). So a request without oracles has no number at all: it is
absent from `requests`, its row of the backward matrices is None (never 0, never an earlier
request's value), and the columns s of a scheduled row t still cover every F_s, s ≤ t.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unlearnbench.errors import DamagedFileError
from unlearnbench.evaluation.evaluator import EvalLogits
from unlearnbench.evaluation.keys import accuracy
from unlearnbench.evaluation.oracle_mia import logit_confidence
from unlearnbench.evaluation.privacy import EPS_KEYS, eps_floor, eps_score, forget_score, rmia_attack, tow_scores
from unlearnbench.evaluation.scoring import request_scores
from unlearnbench.records import RequestRecord, RunIdentity
from unlearnbench.rundir import RunDirectory, SavedLogits
from unlearnbench.seeds import attack_seed
from unlearnbench.streams.base import Request

#: The ε score's smallest N: with 2 models a side its buckets stop at ceil(log 1) = 0 (`privacy.bucket_points`).
MIN_EPS_CHAINS = 3


@dataclass(frozen=True)
class Chain:
    """One chain's identity, manifest, and the rows and saved logits of the requests served (up to a diverged one,
    which saved none)."""

    identity: RunIdentity
    manifest: dict
    rows: list[RequestRecord]
    logits: list[SavedLogits]

    @property
    def unlearn_seed(self) -> int:
        return self.identity.seed if self.identity.unlearn_seed is None else self.identity.unlearn_seed

    @classmethod
    def load(cls, path: Path) -> Chain:
        run_dir = RunDirectory(path)
        rows = run_dir.rows()
        served = [row.status == "ok" for row in rows]
        rows = rows[: served.index(False)] if False in served else rows
        logits = [run_dir.saved_logits(row.t) for row in rows]
        if None in logits:
            missing = rows[logits.index(None)].t
            raise DamagedFileError(f"{path} holds no saved logits of request {missing}; run it with --save-logits")
        return cls(run_dir.identity(), run_dir.manifest(), rows, logits)


def _oracles(saved: SavedLogits, split: str) -> list[np.ndarray]:
    """The K oracles' logits of one split, in train-seed order."""
    return [oracle[split] for oracle in saved.oracles]


def _phi(train_logits: Sequence[np.ndarray], labels: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return np.stack([logit_confidence(z[indices], labels[indices]) for z in train_logits])


def _utility(train, test, labels, retain: np.ndarray, test_retain: np.ndarray) -> dict:
    """Retain and test accuracy (%) of each model, for the ε score's utility ratio."""
    train_labels, test_labels = labels
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    return {
        "retain_acc": [accuracy(z[retain], train_labels[retain], classes) for z in train],
        "test_acc": [accuracy(z[test_retain], test_labels[test_retain], classes) for z in test],
    }


def _rmia_aucs(
    saved: list[SavedLogits], references: list, labels, forget: np.ndarray, classwise: bool
) -> list[float | None]:
    return [
        rmia_attack((z.method["train"], z.method["test"]), references, *labels, forget, classwise)["rmia_auc"]
        for z in saved
    ]


def _mean(values: list[float | None]) -> float | None:
    """The mean of the values that exist (a degenerate chain's RMIA is None); None if none does."""
    values = [value for value in values if value is not None]
    return float(np.mean(values)) if values else None


def _requests(manifest_requests: list[dict], labels) -> list[Request]:
    """The stream's requests as the runner scored them (`streams.base.build_requests`), from the manifest."""
    train, test = np.arange(len(labels[0])), np.arange(len(labels[1]))
    requests, forgotten = [], np.array([], dtype=np.int64)
    for entry in manifest_requests:
        forget = np.asarray(entry["forget"], dtype=np.int64)
        forgotten = np.union1d(forgotten, forget)
        test_forget = np.asarray(entry["test_forget"], dtype=np.int64)
        requests.append(
            Request(
                t=entry["t"],
                forget=forget,
                forgotten=forgotten,
                retain=np.setdiff1d(train, forgotten, assume_unique=True),
                forget_classes=tuple(entry["forget_classes"]) if entry["forget_classes"] else None,
                test_forget=test_forget,
                test_retain=np.setdiff1d(test, test_forget, assume_unique=True),
            )
        )
    return requests


def _oracle_scores(oracle_train, oracle_test, labels, requests: list[Request], t: int, identity: RunIdentity):
    """Each oracle's scores after request t as the runner scores a row's oracle (`Runner.score`: the SVC attack
    seeded with `seeds.attack_seed(seed, t)`, the run's protocol)."""
    return [
        request_scores(
            EvalLogits(train, test),
            *labels,
            requests[t - 1],
            requests,
            train.shape[1],
            mia_seed=attack_seed(identity.seed, t),
            mia_protocol=identity.mia_protocol,
        )
        for train, test in zip(oracle_train, oracle_test, strict=True)
    ]


def _paired_tow(chains: list[Chain], oracles: list[dict], t: int) -> dict:
    """`tow`, `tow_mia`: the mean over chains of chain i against oracle i (each chain's in `<key>_chains`);
    `tow_oracles`, `tow_mia_oracles`: the mean over the oracle pairs i < j (both ToWs are symmetric)."""
    paired = [tow_scores(chain.rows[t - 1].method, oracle) for chain, oracle in zip(chains, oracles, strict=True)]
    pairs = [tow_scores(oracles[i], oracles[j]) for i in range(len(oracles)) for j in range(i + 1, len(oracles))]
    result = {}
    for key in ("tow", "tow_mia"):
        result |= {key: _mean([row[key] for row in paired]), f"{key}_chains": [row[key] for row in paired]}
        result[f"{key}_oracles"] = _mean([row[key] for row in pairs])
    return result


def _shared_stream(chains: list[Chain]) -> list[dict]:
    """The requests of the stream every chain holds; ValueError where they hold different ones."""
    forget_sets = [[r["forget"] for r in chain.manifest["requests"]] for chain in chains]
    if any(sets != forget_sets[0] for sets in forget_sets):
        raise ValueError("the chains hold different streams; run them with the same seed or stream seed")
    return chains[0].manifest["requests"]


def _shared_oracles(saved: list[SavedLogits], t: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The K oracles of request t (train and test logits) for K chains, none where none was scheduled: the first K
    of the M >= K saved (module docstring); ValueError unless every chain holds the same schedule and, at a
    scheduled request, at least one oracle per chain."""
    if len({len(z.oracles) for z in saved}) > 1:
        raise ValueError(f"the chains hold different oracle schedules (request {t}); run them with the same options")
    oracle_train, oracle_test = _oracles(saved[0], "train"), _oracles(saved[0], "test")
    if oracle_train and len(oracle_train) < len(saved):
        raise ValueError(
            f"{len(saved)} chains need at least {len(saved)} oracles per request (--oracle-seeds), "
            f"got {len(oracle_train)}"
        )
    return oracle_train[: len(saved)], oracle_test[: len(saved)]


def chain_privacy(paths: Sequence[Path | str]) -> dict:
    """`requests` (ε score beside its floor, RMIA and ToW over the chains, one entry per request with oracles, each
    naming its `t`) and `backward_eps`/`backward_rmia` (one row per request served, row t − 1 holding the values
    of F_1..F_t at t; None for a request without oracles).

    Every chain must hold the same stream, the same oracle schedule and, at a scheduled request, at
    least as many oracles as there are chains (of more, the first K: module docstring). With 2 chains
    the ε values are None (every F would be 0) and RMIA and ToW are still computed.
    """
    chains = sorted((Chain.load(Path(path)) for path in paths), key=lambda chain: chain.unlearn_seed)
    manifest_requests = _shared_stream(chains)
    saved_labels = RunDirectory(Path(paths[0])).labels()
    labels = (saved_labels.train, saved_labels.test)
    requests = _requests(manifest_requests, labels)
    classwise = requests[0].forget_classes is not None
    eps_chains = len(chains) >= MIN_EPS_CHAINS
    result: dict = {"chains": len(chains), "requests": [], "backward_eps": [], "backward_rmia": []}
    for t in range(1, min(len(chain.rows) for chain in chains) + 1):
        saved = [chain.logits[t - 1] for chain in chains]
        oracle_train, oracle_test = _shared_oracles(saved, t)
        if not oracle_train:  # no oracle scheduled at t: no reference distribution, no number (module docstring)
            result["backward_eps"].append(None)
            result["backward_rmia"].append(None)
            continue
        references = list(zip(oracle_train, oracle_test, strict=True))
        method_train, method_test = [z.method["train"] for z in saved], [z.method["test"] for z in saved]
        request = requests[t - 1]
        scores = dict.fromkeys(EPS_KEYS)
        if eps_chains:
            scores = eps_score(
                _phi(method_train, labels[0], request.forget),
                _phi(oracle_train, labels[0], request.forget),
                _utility(method_train, method_test, labels, request.retain, request.test_retain),
                _utility(oracle_train, oracle_test, labels, request.retain, request.test_retain),
            )
        rmia = [_rmia_aucs(saved, references, labels, requests[s].forget, classwise) for s in range(t)]
        oracles = _oracle_scores(oracle_train, oracle_test, labels, requests, t, chains[0].identity)
        result["requests"].append(
            {
                "t": t,
                **scores,
                "eps_forget_floor": eps_floor(len(chains)) if eps_chains else None,
                "rmia_auc": _mean(rmia[-1]),
                "rmia_auc_chains": rmia[-1],
                "rmia_degenerate": sum(auc is None for auc in rmia[-1]),
                **_paired_tow(chains, oracles, t),
            }
        )
        result["backward_eps"].append(
            [
                forget_score(
                    _phi(method_train, labels[0], requests[s].forget), _phi(oracle_train, labels[0], requests[s].forget)
                )
                if eps_chains
                else None
                for s in range(t)
            ]
        )
        result["backward_rmia"].append([_mean(aucs) for aucs in rmia])
    return result
