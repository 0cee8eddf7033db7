"""The leaderboard equals a direct computation from run directories; unfinished and diverged runs are shown."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from unlearnbench.cli import main
from unlearnbench.records import RequestRecord, RunSummary
from unlearnbench.report.leaderboard import (
    ORACLE_LABEL,
    ORIGINAL_LABEL,
    build_groups,
    build_leaderboard,
    collect_runs,
    column_keys,
)
from unlearnbench.rundir import RunDirectory

KEYS = ("forget_acc", "forget_test_acc", "retain_acc", "test_acc", "mia_member_rate")
ACC_KEYS = ("forget_acc", "forget_test_acc", "retain_acc", "test_acc")
SVC_KEYS = ("mia_validity", "mia_advantage")
T = 3
SINGLE_SHOT_AT = (2, 3)


def fake_run(
    root: Path,
    method: str,
    seed: int,
    rng: np.random.Generator,
    done: int = T,
    status: str | None = "complete",
    guards: list[dict] | None = None,
    method_args: dict | None = None,
    name_suffix: str = "",
    original: bool = False,
    settings: dict | None = None,
    method_defaults: dict | None = None,
) -> Path:
    """A run directory as the runner writes it, with random numbers; `done` requests, `status` in summary.json
    (None: no summary.json, i.e. unfinished). `settings` are identity fields added or replaced (`dataset_args`,
    `arch_args`, `recipe`, ...): the oracle and the original model depend on them and on the seed only.
    `method_defaults`: the method's defaults as the run's session recorded them in provenance.json."""
    identity = {
        "method": method,
        "method_args": method_args or {"lr": 0.01},
        "stream": "classwise",
        "size": 1,
        "requests": T,
        "dataset": "digits",
        "arch": "smallcnn",
        "seed": seed,
        "oracle": "retrain",
        "mia_protocol": "salun",
        "recipe": {"epochs": 4},
        "precision": "32-true",
    }
    if guards:
        identity["guards"] = guards
    identity |= settings or {}
    name = "+".join([method, *(name for guard in guards or [] for name in guard)])
    path = root / f"{name}-classwise-digits-smallcnn-T{T}-seed{seed}-abcd{seed}{name_suffix}"
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(identity, sort_keys=False))  # as the runner writes it
    requests = [{"t": t, "forget": [t], "forget_classes": [t]} for t in range(1, T + 1)]
    (path / "manifest.json").write_text(json.dumps({"requests": requests}))
    np.savez(path / "labels.npz", train=np.arange(T + 1), test=np.arange(T + 1))
    if method_defaults is not None:
        session = {"method_code": {"package": "unlearnbench", "defaults": method_defaults}}
        (path / "provenance.json").write_text(json.dumps({**session, "sessions": [session]}))
    setting = [*json.dumps(settings, sort_keys=True).encode()] if settings else []

    def draws(base: int) -> np.random.Generator:
        return np.random.default_rng([base + seed, *setting] if setting else base + seed)

    oracle_rng = draws(1000)  # the oracle depends on the seed and the settings only
    single_shot_rng = draws(2000)
    null_rng = draws(3000)  # the advantage's null interval: the other draws stay as they were
    original_rng = draws(4000)  # the pretrained model, too, depends on the seed and the settings only
    rows = []
    for t in range(1, done + 1):
        method_scores = {k: float(rng.uniform(0, 100)) for k in (*KEYS, *SVC_KEYS)}
        method_scores["mia_validity_lo"], method_scores["mia_validity_hi"] = sorted(rng.uniform(30, 80, 2).tolist())
        method_scores |= {"rte_s": float(rng.uniform(0.1, 2)), "update_norm": float(rng.uniform(0, 5))}
        method_scores["rte_cpu_s"] = float(rng.uniform(0.1, 2))
        method_scores["history"] = [float(rng.uniform(0, 100)) for _ in range(T)]
        oracle = {k: float(oracle_rng.uniform(0, 100)) for k in (*KEYS, *SVC_KEYS)}
        oracle["mia_validity_lo"], oracle["mia_validity_hi"] = sorted(oracle_rng.uniform(30, 80, 2).tolist())
        oracle["history"] = [float(oracle_rng.uniform(0, 100)) for _ in range(T)]
        for scores in (method_scores, oracle):
            scores["mia_advantage_null_lo"], scores["mia_advantage_null_hi"] = sorted(null_rng.uniform(0, 100, 2))
        method_scores["gap"] = float(np.mean([abs(method_scores[k] - oracle[k]) for k in KEYS]))
        method_scores["gap_acc"] = float(np.mean([abs(method_scores[k] - oracle[k]) for k in ACC_KEYS]))
        single_shot = None
        if t in SINGLE_SHOT_AT:  # `--single-shot-every 2` with T = 3: t = 2 and T
            single_shot = {"forget_acc": float(single_shot_rng.uniform(0, 100))}
            method_scores["forward_gain"] = method_scores["forget_acc"] - single_shot["forget_acc"]
        row = {"t": t, "status": "ok", "forget_classes": [t], "method": method_scores, "oracle": oracle}
        row |= {"single_shot": single_shot}
        if original:  # the pretrained model on request t's sets, its history row at t = 1 only
            scores = {k: float(original_rng.uniform(0, 100)) for k in (*KEYS, *SVC_KEYS)}
            scores["gap"] = float(np.mean([abs(scores[k] - oracle[k]) for k in KEYS]))
            scores["gap_acc"] = float(np.mean([abs(scores[k] - oracle[k]) for k in ACC_KEYS]))
            if t == 1:
                scores["history"] = [float(original_rng.uniform(0, 100)) for _ in range(T)]
            row["original"] = scores
        rows.append(row)
    if status == "diverged":
        diverged = {"t": done + 1, "status": "diverged", "forget_classes": [done + 1], "method": {"rte_s": 0.1}}
        rows.append(diverged | {"oracle": None, "single_shot": None})
    run_dir = RunDirectory(path)
    for row in rows:  # metrics.jsonl and history.csv, as the runner appends them
        run_dir.append_row(RequestRecord.from_json(row))
    if status is not None:
        run_dir.write_summary(RunSummary(done, {}, status, done + 1 if status == "diverged" else None))
    run_dir.save_state(done, {"weight": torch.zeros(1)})  # the method after the last request served
    if not (path / "provenance.json").exists():  # the runner writes one in every run; with the defaults, above
        (path / "provenance.json").write_text(json.dumps({"sessions": []}))
    return path


def rewrite_rows(path: Path, rows: list[dict]) -> None:
    """A run's rows replaced, with the history.csv they give (else the run reads as damaged)."""
    for name in ("metrics.jsonl", "history.csv"):
        (path / name).unlink()
    for row in rows:
        RunDirectory(path).append_row(RequestRecord.from_json(row))


def expected_values(path: Path, side: str = "method") -> dict:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    scores = [row[side] for row in rows]
    history = np.array([s["history"] for s in scores])
    drops = [history[t, s] - history[s, s] for t in range(len(rows)) for s in range(t)]
    values = {k: scores[-1][k] for k in (*KEYS, *SVC_KEYS)}
    values["forget_drift"] = scores[-1]["forget_acc"] - scores[0]["forget_acc"]
    if side == "method":  # the paper's table: single-shot forget acc on F_T, the gain at T and its mean
        single_shot = {row["t"]: row["single_shot"]["forget_acc"] for row in rows if row["single_shot"]}
        gains = [scores[t - 1]["forget_acc"] - value for t, value in single_shot.items()]
        values["single_shot_forget_acc"] = single_shot[len(rows)]
        values["forward_failure"] = gains[-1]
        values["forward_failure_mean"] = float(np.mean(gains))
    else:  # retraining is its own single-shot counterfactual
        values["single_shot_forget_acc"] = scores[-1]["forget_acc"]
        values["forward_failure"] = values["forward_failure_mean"] = 0.0
    values["backward_failure_max"] = max(drops)
    values["rememorization_events"] = sum(drop > 10.0 for drop in drops)  # scoring's default threshold
    if side == "oracle":  # against itself: nothing beyond its own drift, nothing above its own accuracy
        values["knowledge_erosion"], values["forgetting_reversal_events"] = 0.0, 0
    if side == "method":
        oracle_history = np.array([row["oracle"]["history"] for row in rows])
        versus = [history[t, s] - oracle_history[t, s] for t in range(len(rows)) for s in range(t)]
        values["backward_failure_vs_oracle_max"] = max(versus)
        oracle_retain = [row["oracle"]["retain_acc"] for row in rows]
        values["knowledge_erosion"] = (oracle_retain[-1] - oracle_retain[0]) - (
            scores[-1]["retain_acc"] - scores[0]["retain_acc"]
        )
        values["forgetting_reversal_events"] = sum(
            history[s, s] - oracle_history[s, s] <= 10.0
            and history[t, s] - history[s, s] > 10.0
            and history[t, s] - oracle_history[t, s] > 10.0
            for t in range(len(rows))
            for s in range(t)
        )
        values["gap"] = scores[-1]["gap"]
        values["mean_gap"] = float(np.mean([s["gap"] for s in scores]))
        values["gap_acc"] = scores[-1]["gap_acc"]
        values["mean_gap_acc"] = float(np.mean([s["gap_acc"] for s in scores]))
        values["rte_s"] = float(np.sum([s["rte_s"] for s in scores]))
        values["rte_cpu_s"] = float(np.sum([s["rte_cpu_s"] for s in scores]))
    return values


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(7)
    root = tmp_path / "runs"
    made = {
        "ga": [fake_run(root, "ga", seed, rng) for seed in (0, 1, 2)],
        "rl": [fake_run(root, "rl", seed, rng) for seed in (0, 1)],
        "salun": [fake_run(root, "salun", 0, rng), fake_run(root, "salun", 1, rng, done=1, status=None)],
        "finetune": [fake_run(root, "finetune", 0, rng, done=1, status="diverged")],
    }
    (root / "store").mkdir()
    (root / "store" / "abc.json").write_text("{}")
    return root, made


def test_numbers_equal_a_direct_computation(runs, tmp_path):
    root, made = runs
    board = build_leaderboard(root, tmp_path / "board")
    (group,) = board.groups
    assert group.rows[0].label == ORACLE_LABEL and group.rows[0].is_oracle
    entries = {entry.label: entry for entry in group.entries}
    assert set(entries) == {"ga", "rl", "salun", "finetune"}
    for method, paths in made.items():
        complete = [
            p for p in paths if (p / "summary.json").exists() and "diverged" not in (p / "summary.json").read_text()
        ]
        complete = [p for p in complete if len((p / "metrics.jsonl").read_text().splitlines()) == T]
        values = [expected_values(p) for p in complete]
        entry = entries[method]
        assert entry.n == len(complete)
        for key, cell in entry.cells.items():
            column = [v[key] for v in values if key in v]  # a column these runs do not compute (the robustness ones)
            if not column:
                assert cell.mean is None
                continue
            assert cell.mean == pytest.approx(np.mean(column), rel=1e-12)
            if len(column) > 1:
                assert cell.std == pytest.approx(np.std(column, ddof=1), rel=1e-12)
            else:
                assert cell.std is None
    # The oracle: one value per seed (seeds 0, 1, 2 among the complete runs).
    oracle_values = [expected_values(made["ga"][seed], "oracle") for seed in (0, 1, 2)]
    for key in (
        "forget_acc",
        "retain_acc",
        "forget_drift",
        "single_shot_forget_acc",
        "forward_failure",
        "knowledge_erosion",
    ):
        assert group.oracle.cells[key].mean == pytest.approx(np.mean([v[key] for v in oracle_values]))
    assert group.oracle.n == 3


def test_best_entries_follow_the_oracle_or_the_direction(runs, tmp_path):
    root, _ = runs
    (group,) = build_leaderboard(root, tmp_path / "board", plots=False).groups
    oracle = group.oracle.cells
    scored = [e for e in group.entries if e.cells["retain_acc"].mean is not None]
    closest = min(scored, key=lambda e: abs(e.cells["retain_acc"].mean - oracle["retain_acc"].mean))
    assert "retain_acc" in closest.best
    fastest = min(scored, key=lambda e: e.cells["rte_cpu_s"].mean)  # time is ranked by CPU seconds, never wall
    assert "rte_cpu_s" in fastest.best
    assert sum("rte_cpu_s" in e.best for e in group.entries) == 1
    assert not any("rte_s" in e.best for e in group.entries)


def test_runs_made_before_cpu_time_was_recorded_show_a_dash(tmp_path):
    rng = np.random.default_rng(23)
    root = tmp_path / "runs"
    old = fake_run(root, "ga", 0, rng)
    rows = [json.loads(line) for line in (old / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        del row["method"]["rte_cpu_s"]
    rewrite_rows(old, rows)
    fake_run(root, "rl", 0, rng)
    board = build_leaderboard(root, tmp_path / "board", plots=False)
    (group,) = board.groups
    cells = {entry.label: entry.cells["rte_cpu_s"] for entry in group.entries}
    assert cells["ga"].text() == "—" and cells["rl"].mean is not None
    assert not any(old.name in line for line in board.files["md"].read_text().splitlines() if "damaged" in line)


def test_guarded_runs_are_a_row_of_their_own(tmp_path):
    """rl and rl + orthogonal of the same seed are two methods, never one row with n = 2."""
    rng = np.random.default_rng(3)
    root = tmp_path / "runs"
    plain = fake_run(root, "rl", 0, rng)
    guarded = fake_run(root, "rl", 0, rng, guards=[{"orthogonal": {"rank": 3}}])
    (group,) = build_groups(collect_runs(root))
    rows = {entry.label: entry for entry in group.entries}
    assert set(rows) == {"rl", "rl+orthogonal"}
    assert rows["rl"].cells["gap"].n == rows["rl+orthogonal"].cells["gap"].n == 1
    assert rows["rl"].cells["gap"].mean == pytest.approx(expected_values(plain)["gap"])
    assert rows["rl+orthogonal"].cells["gap"].mean == pytest.approx(expected_values(guarded)["gap"])


def test_unfinished_and_diverged_runs_are_shown(runs, tmp_path):
    root, _ = runs
    board = build_leaderboard(root, tmp_path / "board")
    entries = {entry.label: entry for entry in board.groups[0].entries}
    assert "unfinished (1/3)" in entries["salun"].status and "1 complete" in entries["salun"].status
    assert "diverged at t=2" in entries["finetune"].status
    assert entries["finetune"].cells["forget_acc"].mean is None
    markdown = board.files["md"].read_text()
    assert "diverged at t=2" in markdown and "unfinished (1/3)" in markdown
    statuses = {run["run"]: run["status"] for run in board.provenance["runs"]}
    assert len(statuses) == len(collect_runs(root)) == 8


def test_markdown_csv_html_and_plots_are_written(runs, tmp_path):
    root, _ = runs
    board = build_leaderboard(root, tmp_path / "board")
    for path in board.files.values():
        assert path.stat().st_size > 0
    markdown = board.files["md"].read_text()
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert lines[1].startswith(f"| *{ORACLE_LABEL}*")  # header, then the oracle row on top
    assert "forget_acc ↓→oracle" in markdown and "**" in markdown
    # the headline's time is the CPU seconds time is ranked by; the wall seconds, which a pause stretches, follow below
    assert lines[0].endswith("| rte_cpu_s ↓ |") and "rte_s ↓" not in lines[0] and "| rte_s ↓ |" in markdown
    assert "## Provenance" in markdown and "0.1.0" in markdown
    rows = list(csv.DictReader(board.files["csv"].open()))
    assert rows[0]["method"] == ORACLE_LABEL and {r["method"] for r in rows[1:]} == {"ga", "rl", "salun", "finetune"}
    html = board.files["html"].read_text()
    assert "<script>" in html and "http://" not in html and "https://" not in html
    pngs = [p for paths in board.plots.values() for p in paths]
    names = {p.name for p in pngs}
    assert {"forget_acc.png", "update_norm.png", "history-ga.png", "history-rl.png"} <= names
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert f"]({png.relative_to(board.files['md'].parent).as_posix()})" in markdown


def test_er_plot_when_geometry_exists(runs, tmp_path):
    root, made = runs
    for path in made["ga"]:
        lines = ["t,update_norm,er_all_r1", *(f"{t},{t * 0.5},{0.9 - 0.1 * t}" for t in range(1, T + 1))]
        (path / "geometry.csv").write_text("\n".join(lines) + "\n")
    board = build_leaderboard(root, tmp_path / "board")
    assert "er.png" in {p.name for paths in board.plots.values() for p in paths}


def test_leaderboard_command(runs, tmp_path, capsys):
    root, _ = runs
    assert main(["leaderboard", str(root), "--out", str(tmp_path / "cli"), "--plots", "false"]) == 0
    assert (tmp_path / "cli" / "leaderboard.md").exists()
    assert "8 run(s) in 1 table(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["leaderboard", str(tmp_path / "missing")])
    assert exit_info.value.code == 2


def test_gap_acc_is_the_headline_and_validity_and_advantage_read_not_significant_at_chance(runs, tmp_path):
    from unlearnbench.evaluation.keys import significant

    root, made = runs
    board = build_leaderboard(root, tmp_path / "board")
    (group,) = board.groups
    assert group.columns[0].key == "gap_acc"
    advantage_notes = set()
    for entry in group.entries:
        complete = [p for p in made[entry.label] if p in [run.path for run in entry.runs if run.status == "complete"]]
        lasts = [json.loads((p / "metrics.jsonl").read_text().splitlines()[-1])["method"] for p in complete]
        expected = any(not significant(s["mia_validity_lo"], s["mia_validity_hi"]) for s in lasts)
        assert entry.cells["mia_validity"].text().endswith("n.s.") is expected
        inside = [s["mia_advantage_null_lo"] <= s["mia_advantage"] <= s["mia_advantage_null_hi"] for s in lasts]
        assert entry.cells["mia_advantage"].text().endswith("n.s.") is any(inside)
        advantage_notes.add(any(inside))
    assert advantage_notes == {True, False}  # both cases met
    text = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "gap_acc" in text.split("| method | n | ")[1].split("|")[0]


# ------------------------------------------------------------------- identity, marking, labels, dates, plots

UNRANKED = {
    "single_shot_forget_acc",
    "forward_failure",
    "forward_failure_mean",
    "forget_drift",
    "backward_failure_max",
    "rememorization_events",
    "knowledge_erosion",
    "forgetting_reversal_events",
    "rte_s",  # wall seconds: a loaded machine stretches them; time is ranked by rte_cpu_s
}


def test_a_run_is_counted_once_however_often_it_is_reached(runs, tmp_path, capsys):
    """A copy of a run and a folder given twice (or a subfolder of another given one) count once: n stays 3."""
    root, made = runs
    import shutil

    copies = tmp_path / "copies"
    shutil.copytree(made["ga"][0], copies / made["ga"][0].name)
    assert (
        main(["leaderboard", str(root), str(copies), str(root / made["rl"][0].name), "--out", str(tmp_path / "b")]) == 0
    )
    out = capsys.readouterr().out
    assert f"not published: {made['ga'][0].name}: duplicate of " in out
    board_runs = collect_runs([root, copies])
    ga_runs = [run for run in board_runs if run.identity.method == "ga"]
    assert len(ga_runs) == 4 and sum(run.duplicate_of is not None for run in ga_runs) == 1
    (group,) = build_groups(board_runs)
    ga = next(entry for entry in group.entries if entry.label == "ga")
    assert ga.n == 3 and ga.cells["gap"].n == 3
    assert ga.cells["gap"].mean == pytest.approx(np.mean([expected_values(p)["gap"] for p in made["ga"]]))


def test_several_folders_make_one_leaderboard(tmp_path):
    rng = np.random.default_rng(5)
    first = [fake_run(tmp_path / "a", "ga", seed, rng) for seed in (0, 1)]
    second = [fake_run(tmp_path / "b", "ga", 2, rng)]
    (group,) = build_leaderboard([tmp_path / "a", tmp_path / "b"], tmp_path / "board", plots=False).groups
    (ga,) = group.entries
    assert ga.n == 3 and ga.cells["gap"].mean == pytest.approx(
        np.mean([expected_values(p)["gap"] for p in first + second])
    )


def test_failure_columns_mark_no_best_and_a_method_that_forgets_nothing_is_never_crowned(tmp_path):
    """finetune keeps forget_acc at 100 on every request, continual and single-shot: fwd_fail, drift and
    bwd_fail are 0, the oracle's own values, yet it must not be crowned in them."""
    rng = np.random.default_rng(11)
    root = tmp_path / "runs"
    fake_run(root, "ga", 0, rng)
    finetune = fake_run(root, "finetune", 0, rng)
    rows = [json.loads(line) for line in (finetune / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row["method"]["forget_acc"], row["method"]["history"] = 100.0, [100.0] * T
        row["oracle"]["forget_acc"] = 0.0
        if row["single_shot"]:
            row["single_shot"]["forget_acc"], row["method"]["forward_gain"] = 100.0, 0.0
    rewrite_rows(finetune, rows)
    (group,) = build_groups(collect_runs(root))
    cells = {entry.label: entry for entry in group.entries}
    assert cells["finetune"].cells["forward_failure"].mean == cells["finetune"].cells["forget_drift"].mean == 0.0
    assert not any(entry.best & UNRANKED for entry in group.entries)
    assert all(column.key in UNRANKED or column.ranked for column in group.columns)
    assert any("gap_acc" in entry.best for entry in group.entries)  # ranked columns still are


def test_variant_labels_name_what_differs_from_the_defaults_the_runs_recorded(tmp_path):
    """The defaults are the run directory's (`provenance.json`), not today's code's: these ga runs were made with a
    ga whose default lr was 0.5 (today's is 1e-4). Runs that recorded none are told apart among themselves."""
    rng = np.random.default_rng(13)
    root = tmp_path / "runs"
    recorded = {"optim": {"lr": 0.5, "epochs": 5, "batch_size": 256, "momentum": 0.9, "weight_decay": 5e-4}}
    flat = recorded["optim"]  # a session from before the settings were a group recorded them flat: read the same
    fake_run(root, "ga", 0, rng, method_args={"optim": {**flat, "lr": 1e-4}}, name_suffix="a", method_defaults=flat)
    fake_run(root, "ga", 0, rng, method_args={"optim": flat}, name_suffix="b", method_defaults=recorded)
    fake_run(root, "my_plugin", 0, rng, method_args={"beta": 0.1, "lr": 0.01}, name_suffix="c")  # none recorded
    fake_run(root, "my_plugin", 0, rng, method_args={"beta": 0.2, "lr": 0.01}, name_suffix="d")
    (group,) = build_groups(collect_runs(root))
    assert sorted(entry.label for entry in group.entries) == [
        "ga",
        "ga (optim.lr=0.0001)",
        "my_plugin (beta=0.1)",
        "my_plugin (beta=0.2)",
    ]


def test_a_leaderboard_is_built_without_importing_the_methods(tmp_path):
    """Tables come from run directories alone: building one (plots too) imports nothing of `unlearnbench.methods`,
    nor the runner or the run configuration, which import it."""
    import subprocess
    import sys

    rng = np.random.default_rng(17)
    root = tmp_path / "runs"
    for method in ("ga", "rl"):
        fake_run(root, method, 0, rng, method_defaults={"lr": 0.01})
    code = (
        "import sys\n"
        "from unlearnbench.report.leaderboard import leaderboard_command\n"
        f"assert leaderboard_command([{str(root)!r}, '--out', {str(tmp_path / 'board')!r}]) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('unlearnbench.methods', 'unlearnbench.runner', "
        "'unlearnbench.config')))\n"
        "assert loaded == [], loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "board" / "leaderboard.md").exists()


def test_a_lone_variant_is_labelled_with_its_non_default_hyperparameters(tmp_path):
    """A `salun` run with a non-default `batches` alone in its table is not labelled plain `salun` (the method as it
    ships); a run at the method's defaults (as its run directory records them) is."""
    rng = np.random.default_rng(17)
    root = tmp_path / "runs"
    defaults = {"batches": "mixed", "ratio": 0.5}
    fake_run(root, "salun", 0, rng, method_args=defaults | {"batches": "forget_then_retain"}, method_defaults=defaults)
    fake_run(root, "ga", 0, rng, method_args={"lr": 1e-4}, method_defaults={"lr": 1e-4})
    (group,) = build_groups(collect_runs(root))
    assert sorted(entry.label for entry in group.entries) == ["ga", "salun (batches=forget_then_retain)"]


def test_labels_read_as_one_parenthesis_and_plot_files_are_short_safe_and_stable(tmp_path):
    """A tuned row says so inside its one parenthesis (`finetune (tuned, optim.lr=0.03)`). Plot files are named by the
    method and a short hash of the label, not by the label: hyperparameter values with `/` or spaces, or enough of
    them to pass the file system's name limit, still give a short, safe file name, the same on every rebuild."""
    rng = np.random.default_rng(19)
    root = tmp_path / "runs"
    defaults = {"optim": {"lr": 0.01}}
    fake_run(root, "finetune", 0, rng, method_args=defaults, method_defaults=defaults)
    tuned = {"tuned": {"study": "s-1", "file": "digits-smallcnn-classwise-finetune.yaml"}}
    fake_run(
        root,
        "finetune",
        0,
        rng,
        method_args={"optim": {"lr": 0.03}},
        name_suffix="t",
        method_defaults=defaults,
        settings=tuned,
    )
    many = {f"knob_{i}": f"a/b c{i}" * 8 for i in range(12)}  # twelve values of 40 characters shown, `/` in each
    fake_run(root, "finetune", 0, rng, method_args=defaults | many, name_suffix="m", method_defaults=defaults)
    labels = {entry.label for entry in build_groups(collect_runs(root))[0].entries}
    assert {"finetune", "finetune (tuned, optim.lr=0.03)"} <= labels and len(labels) == 3
    assert not any(") (" in label for label in labels)
    names = []
    for out in ("board", "again"):
        board = build_leaderboard(root, tmp_path / out)
        (group,) = board.groups
        files = sorted(path.name for path in board.plots[group.slug] if path.name.startswith("history-"))
        assert files == sorted(f"history-{entry.file_stem}.png" for entry in group.entries)
        names.append(files)
    assert names[0] == names[1] and "history-finetune.png" in names[0]  # the method as it ships keeps its name
    for name in names[0]:
        assert re.fullmatch(r"history-finetune(-[0-9a-f]{6})?\.png", name), name


def test_the_date_is_the_runs_own_time_not_a_files(runs, tmp_path):
    root, made = runs
    run_dir = made["rl"][0]
    started = {"started": "2025-01-02T03:04:05+00:00", "device": "cpu"}
    (run_dir / "provenance.json").write_text(json.dumps({**started, "sessions": [started, {"started": "2025-02-01"}]}))
    board = build_leaderboard(root, tmp_path / "board", plots=False)
    dates = {run["run"]: run["date"] for run in board.provenance["runs"]}
    assert dates[run_dir.name] == "2025-01-02 03:04 UTC"
    assert dates[made["ga"][0].name] == "unknown"  # no provenance.json: no date, whatever the files' mtimes


def test_plots_are_png_at_200_dpi_and_svg_with_the_oracle_drawn_on_top(runs, tmp_path, monkeypatch):
    import struct

    from unlearnbench.report import plots

    figures = {}
    save = plots._save
    monkeypatch.setattr(
        plots, "_save", lambda figure, path: figures.setdefault(path.name, figure) and save(figure, path)
    )
    root, _ = runs
    board = build_leaderboard(root, tmp_path / "board")
    pngs = [p for paths in board.plots.values() for p in paths]
    for png in pngs:
        assert png.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
        width, height = struct.unpack(">II", png.read_bytes()[16:24])  # the IHDR chunk
        figure = figures[png.name]
        assert (width, height) == tuple(round(v * 200) for v in figure.get_size_inches())
    lines = figures["forget_acc.png"].axes[0].get_lines()
    oracle = next(line for line in lines if line.get_label() == ORACLE_LABEL)
    assert all(oracle.get_zorder() > line.get_zorder() for line in lines if line is not oracle)


def test_html_tables_scroll_within_1400_px_with_a_sticky_method_column(runs, tmp_path):
    root, _ = runs
    page = build_leaderboard(root, tmp_path / "board", plots=False).files["html"].read_text()
    assert "div.scroll { max-width: 1400px; overflow-x: auto; }" in page
    assert "tr > :first-child { position: sticky; left: 0;" in page
    assert page.count('<div class="scroll"><table class="leaderboard headline"') == 1
    assert page.count('<details class="all"><summary>All ') == 1


def test_each_table_opens_with_a_headline_of_at_most_8_columns_and_folds_the_rest(runs, tmp_path):
    """The Markdown page: per setting, a headline table (method, n and `HEADLINE_COLUMNS`) with the reference rows
    and every method, then every column and the statuses under a <details> element."""
    from unlearnbench.report.leaderboard import HEADLINE_COLUMNS

    root, _ = runs
    board = build_leaderboard(root, tmp_path / "board", plots=False)
    (group,) = board.groups
    text = board.files["md"].read_text()
    section = text.split(f"## {group.title}", 1)[1]
    headline, rest = section.split("<details><summary>", 1)
    header = next(line for line in headline.splitlines() if line.startswith("| method"))
    cells = [cell.strip() for cell in header.strip("|").split("|")]
    assert len(cells) <= 8
    assert cells[:2] == ["method", "n"]
    titles = {column.key: column.title for column in group.columns}
    assert [cell.split()[0] for cell in cells[2:]] == [titles[key] for key in HEADLINE_COLUMNS if key in titles]
    assert {"gap_acc", "forget_acc", "retain_acc", "test_acc"} <= set(titles)
    rows = [line for line in headline.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert [row.split("|")[1].strip().strip("*") for row in rows] == [entry.label for entry in group.rows]
    full, _ = rest.split("</details>", 1)
    full_header = next(line for line in full.splitlines() if line.startswith("| method"))
    assert len(full_header.strip("|").split("|")) == 2 + len(group.columns) + 1  # and the status
    assert full_header.rstrip().endswith("| status |")


@pytest.mark.slow
def test_unlearning_chains_share_a_row_and_show_their_backward_privacy(tmp_path):
    """K = 3 tiny finetune chains (unlearn seeds 0, 1, 2) with 3 oracles at t = 2 and 3 (`--oracle-every 2`,
    T = 3), saved with `--save-logits`: one row, its heatmaps beside the history, its numbers `chain_privacy`'s."""
    from tests.conftest import tiny_config
    from unlearnbench.evaluation.chains import chain_privacy
    from unlearnbench.report.privacy import PRIVACY_KEYS
    from unlearnbench.runner import Runner

    options = {"requests": 3, "oracle_seeds": 3, "oracle_every": 2, "save_logits": True}
    paths = [
        Runner.from_config(tiny_config(tmp_path / "runs", tmp_path / "store", "finetune", unlearn_seed=k, **options))
        .run()
        .run_dir
        for k in range(3)
    ]
    board = build_leaderboard(tmp_path / "runs", tmp_path / "board")
    (group,) = board.groups
    (entry,) = group.entries
    assert entry.label == "finetune (optim.epochs=2)" and entry.n == 3 and entry.privacy.chains == 3
    expected = chain_privacy(paths)
    assert [r["t"] for r in expected["requests"]] == [2, 3]
    for key in PRIVACY_KEYS:
        assert np.isnan(entry.privacy.requests[key][0])  # no oracle at t = 1: no number
        assert entry.privacy.requests[key][1:].tolist() == pytest.approx([r[key] for r in expected["requests"]])
    for name in ("eps", "rmia"):
        matrix = entry.privacy.backward[name]
        assert np.isnan(matrix[0]).all() and np.isnan(matrix[1, 2])
        assert matrix[2].tolist() == pytest.approx(expected[f"backward_{name}"][2])
        assert matrix[1, :2].tolist() == pytest.approx(expected[f"backward_{name}"][1])
    names = [path.name for path in board.plots[group.slug]]
    history = names.index(f"history-{entry.file_stem}.png")
    assert names[history + 1 : history + 3] == [
        f"backward_eps-{entry.file_stem}.png",
        f"backward_rmia-{entry.file_stem}.png",
    ]
    markdown = board.files["md"].read_text()
    assert "finetune (optim.epochs=2): privacy over 3 unlearning chains" in markdown
    assert f"| 3 | {expected['requests'][1]['eps_forget_score']:.3f} | " in markdown
    assert "| 1 | " + " | ".join(["—"] * len(PRIVACY_KEYS)) + " |" in markdown
    assert "privacy over 3 unlearning chains" in board.files["html"].read_text()


OLD_RUNS = Path(__file__).parent / "fixtures" / "old_runs"


def test_run_folders_written_by_an_earlier_version_give_the_same_leaderboard(tmp_path):
    """Two finished run folders (finetune and ga, digits, T = 3, one epoch each) written by version 0.1.0 before
    `RunDirectory` became the one reader of a run directory, with the files the leaderboard reads (the
    checkpoint, updates and logger files left out), and what that version's leaderboard made of them:
    leaderboard.csv, and per run its status, rows, summary keys, history and geometry. Reading old folders
    must keep giving the same numbers, to the last digit written (a column added since is no difference), except
    where a definition changed on purpose: `forward_failure_mean` averages over t >= 2 since the gain at t = 1 was
    recognized as 0 by construction (finetune 3.26696 -> 4.90043, ga 1.17371 -> 1.76056 in the fixture); wall
    seconds are no longer ranked (a loaded machine stretches them), CPU seconds are, and these runs predate them.
    Their labels stay the method's name: they recorded no defaults to depart from."""
    expected = json.loads((OLD_RUNS.parent / "old_runs_records.json").read_text())
    board = build_leaderboard(OLD_RUNS, tmp_path / "board", plots=False)
    table = {(row["group"], row["method"]): row for row in csv.DictReader(board.files["csv"].open())}
    with (OLD_RUNS.parent / "old_runs_leaderboard.csv").open() as f:
        old_table = list(csv.DictReader(f))
    assert sorted(table) == sorted((row["group"], row["method"]) for row in old_table)
    for old_row in old_table:
        row = table[old_row["group"], old_row["method"]]
        assert {k: row[k] for k in old_row if k != "best"} == {k: v for k, v in old_row.items() if k != "best"}
        assert set(old_row["best"].split()) - {"rte_s"} <= set(row["best"].split())  # time: ranked by CPU seconds
    # their rows predate costs: the provenance column added since says so, the rest is as that version wrote it
    assert [run.pop("cpu_s") for run in board.provenance["runs"]] == ["—"] * len(expected["provenance_runs"])
    assert board.provenance["runs"] == expected["provenance_runs"]
    runs = {run.path.name: run for run in collect_runs(OLD_RUNS)}
    assert sorted(runs) == sorted(expected["records"])
    for name, record in expected["records"].items():
        run = runs[name]
        assert run.status_detail() == record["status"] and run.problem is record["problem"] is None
        assert len(run.rows) == record["rows"] and sorted(run.summary.to_json()) == record["summary_keys"]
        assert run.error is record["error"] is None
        np.testing.assert_array_equal(run.history, np.array(record["history"]))
        assert run.geometry == record["geometry"]


def test_the_original_row_is_the_pretrained_models_last_scores_and_mean_gaps_beside_the_oracle(tmp_path):
    """Runs that record the original model get its row under the oracle's, equal to a direct computation over seeds;
    it is a reference, never ranked, and runs made before it existed (no `original` in their rows) get none."""
    rng = np.random.default_rng(5)
    root = tmp_path / "runs"
    paths = [fake_run(root, method, seed, rng, original=True) for method in ("ga", "rl") for seed in (0, 1)]
    board = build_leaderboard(root, tmp_path / "board")
    (group,) = board.groups
    assert [entry.label for entry in group.references] == [ORACLE_LABEL, ORIGINAL_LABEL]
    assert [entry.label for entry in group.rows[:2]] == [ORACLE_LABEL, ORIGINAL_LABEL]
    original = group.original
    assert original.is_original and not original.is_oracle and original.best == set()
    per_seed = {}
    for path in paths[:2]:  # every method of a seed shares the pretrained model: the first run of each seed
        rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        per_seed[path.name] = {
            "forget_acc": rows[-1]["original"]["forget_acc"],
            "mean_gap_acc": float(np.mean([row["original"]["gap_acc"] for row in rows])),
        }
    for key in ("forget_acc", "mean_gap_acc"):
        assert original.cells[key].mean == pytest.approx(np.mean([v[key] for v in per_seed.values()]))
    assert original.cells["forward_failure"].mean is None  # the stream-wide failures belong to methods
    markdown = board.files["md"].read_text()
    assert f"| *{ORIGINAL_LABEL}* | 2 |" in markdown
    csv_rows = list(csv.DictReader(board.files["csv"].open()))
    assert [row["method"] for row in csv_rows if row["is_original"] == "1"] == [ORIGINAL_LABEL]

    older = tmp_path / "older"
    fake_run(older, "ga", 0, rng)
    (older_group,) = build_leaderboard(older, tmp_path / "older_board").groups
    assert older_group.original is None and older_group.references == [older_group.oracle]


# ------------------------------------------------------------------------------------ one table per setting

SMALL = {"dataset_args": {"train_size": 700, "test_size": 500}, "arch_args": {"pools": 2}}
LARGE = {"dataset_args": {"train_size": 1000, "test_size": 500}, "arch_args": {"pools": 2}}
TITLE = "digits (train_size={}, test_size=500) · smallcnn (pools=2) · classwise (1 class per request, T=3)"
SLUG = "digits-train_size{}-test_size500-smallcnn-pools2-classwise-size1-T3"


def _best_by_hand(methods: dict[str, list[Path]], oracle: dict[str, float], column) -> set[str]:
    """The labels a table marks best in `column`, from the run files: the means over each method's runs, closest to
    `oracle` (its oracle row's means) where the oracle is the target, else by direction."""
    means = {label: np.mean([expected_values(p)[column.key] for p in paths]) for label, paths in methods.items()}
    if column.oracle_is_target:
        score = {label: abs(mean - oracle[column.key]) for label, mean in means.items()}
    else:
        score = {label: -mean if column.higher_is_better else mean for label, mean in means.items()}
    return {label for label, value in score.items() if np.isclose(value, min(score.values()))}


def test_runs_on_two_subsets_make_two_tables_each_with_its_own_oracle_original_and_best(tmp_path):
    """ga and salun on 700 train images, rl and scrub on 1,000: two tables, never one under the 700-image oracle.
    Each table's oracle and original rows come from its own runs, and its best marks are read against its own
    oracle (the subsets' oracles differ, so marking against the other would pick other methods)."""
    rng = np.random.default_rng(17)
    root = tmp_path / "runs"
    made = {
        700: {
            m: [fake_run(root, m, s, rng, original=True, settings=SMALL, name_suffix="s") for s in (0, 1)]
            for m in ("ga", "salun")
        },
        1000: {
            m: [fake_run(root, m, s, rng, original=True, settings=LARGE, name_suffix="l") for s in (0, 1)]
            for m in ("rl", "scrub")
        },
    }
    board = build_leaderboard(root, tmp_path / "board")
    assert [group.title for group in board.groups] == [TITLE.format(1000), TITLE.format(700)]
    assert [group.slug for group in board.groups] == [SLUG.format(1000), SLUG.format(700)]
    assert sorted(board.plots) == sorted(group.slug for group in board.groups)  # a plot folder each
    html = board.files["html"].read_text()
    assert all(f'<h2 id="{group.slug}">' in html for group in board.groups)
    references = {}
    for size, group in zip((1000, 700), board.groups, strict=True):
        methods = made[size]
        assert {entry.label for entry in group.entries} == set(methods)
        assert [entry.label for entry in group.references] == [ORACLE_LABEL, ORIGINAL_LABEL]
        # one value per seed, from this subset's runs only (every method of a seed holds the same oracle)
        first_of_seed = methods[sorted(methods)[0]]
        oracle = {k: np.mean([expected_values(p, "oracle")[k] for p in first_of_seed]) for k in KEYS}
        assert group.oracle.n == group.original.n == 2
        for key in KEYS:
            assert group.oracle.cells[key].mean == pytest.approx(oracle[key], rel=1e-12)
        last = [json.loads((p / "metrics.jsonl").read_text().splitlines()[-1]) for p in first_of_seed]
        assert group.original.cells["forget_acc"].mean == pytest.approx(
            np.mean([r["original"]["forget_acc"] for r in last])
        )
        assert {run.path for run in group.oracle.runs} == set(first_of_seed)
        references[size] = {k: group.oracle.cells[k].mean for k in column_keys()}
    for size, group in zip((1000, 700), board.groups, strict=True):
        other = references[1700 - size]
        marked_against_the_other = False
        for column in group.columns:
            best = {entry.label for entry in group.entries if column.key in entry.best}
            if not column.ranked:
                assert best == set()
                continue
            assert best == _best_by_hand(made[size], references[size], column), column.key
            marked_against_the_other |= column.oracle_is_target and best != _best_by_hand(made[size], other, column)
        assert marked_against_the_other  # the numbers tell the two oracles apart: the test would see a mix-up
    csv_rows = list(csv.DictReader(board.files["csv"].open()))
    assert sorted({row["group"] for row in csv_rows}) == sorted(group.title for group in board.groups)
    assert sum(row["is_oracle"] == "1" for row in csv_rows) == sum(row["is_original"] == "1" for row in csv_rows) == 2


def test_a_table_of_one_method_marks_nothing_best(tmp_path):
    """Alone in its table (or the only one with a value in a column), a method is not best at anything: SalUn at
    97% forget_acc would otherwise be bold beside an oracle at 0%."""
    rng = np.random.default_rng(19)
    root = tmp_path / "runs"
    for seed in (0, 1):
        fake_run(root, "salun", seed, rng)
    fake_run(root, "ga", 0, rng, done=1, status=None)  # unfinished: no value in any column
    board = build_leaderboard(root, tmp_path / "board", plots=False)
    (group,) = board.groups
    assert {entry.label for entry in group.entries} == {"salun", "ga"}
    assert all(entry.best == set() for entry in group.rows)
    assert {row["best"] for row in csv.DictReader(board.files["csv"].open())} == {""}
    table = board.files["md"].read_text().split("## ")[1].split("## Provenance")[0]
    assert "**" not in table
    fake_run(root, "rl", 0, rng)  # a second method with values: now there is something to compare
    (group,) = build_groups(collect_runs(root))
    assert any("gap_acc" in entry.best for entry in group.entries)


def test_tables_that_differ_beyond_dataset_and_arch_say_how_and_keep_unique_slugs(tmp_path):
    """Settings that differ in the recipe or the oracle schedule are tables of their own; the title states what
    departs from a default (`oracle_every=2`) and what tells two otherwise alike tables apart (the recipe's hash).
    A setting without arguments keeps the title it always had."""
    rng = np.random.default_rng(23)
    root = tmp_path / "runs"
    fake_run(root, "ga", 0, rng)
    fake_run(root, "ga", 0, rng, settings={"recipe": {"epochs": 8}}, name_suffix="r")
    fake_run(root, "ga", 0, rng, settings={"oracle_every": 2}, name_suffix="o")
    groups = build_groups(collect_runs(root))
    plain = "digits · smallcnn · classwise (1 class per request, T=3)"
    titles = sorted(group.title for group in groups)
    assert len(titles) == 3 and all(title.startswith(plain + " · ") for title in titles)
    assert sum("oracle_every=2" in title for title in titles) == 1
    assert len({title.split("recipe=")[1].split(",")[0] for title in titles}) == 2  # two recipes, two hashes
    assert len({group.slug for group in groups}) == 3
    alone = tmp_path / "alone"
    fake_run(alone, "ga", 0, rng)
    (group,) = build_groups(collect_runs(alone))
    assert (group.title, group.slug) == (plain, "digits-smallcnn-classwise-size1-T3")


def test_reference_rows_take_one_value_per_pretrained_model_and_stream(tmp_path):
    """Runs of seed 0 on another stream seed share the table (a seed is no setting) but not the oracles: the oracle
    row averages both streams' oracles, never the first run's of the seed alone."""
    rng = np.random.default_rng(29)
    root = tmp_path / "runs"
    paths = [fake_run(root, "ga", 0, rng), fake_run(root, "ga", 0, rng, settings={"stream_seed": 5}, name_suffix="s")]
    (group,) = build_groups(collect_runs(root))
    assert len(group.entries) == 2 and sum("stream_seed=5" in entry.label for entry in group.entries) == 1
    assert group.oracle.n == 2
    expected = np.mean([expected_values(path, "oracle")["forget_acc"] for path in paths])
    assert group.oracle.cells["forget_acc"].mean == pytest.approx(expected, rel=1e-12)


def test_a_privacy_caption_says_which_oracles_the_chains_met():
    """Chains run with more oracles than chains meet the first K of them (`chain_privacy`): the caption says so."""
    from types import SimpleNamespace

    from unlearnbench.report.privacy import ChainPrivacy, privacy_caption

    def caption(oracles: int) -> str:
        privacy = ChainPrivacy(chains=8, oracles=oracles, seeds=[0], requests={}, backward={})
        return privacy_caption(SimpleNamespace(label="rl", privacy=privacy))

    assert caption(8).startswith("rl: privacy over 8 unlearning chains against 8 oracles per request (seed(s) 0;")
    assert caption(32).startswith("rl: privacy over 8 unlearning chains against the first 8 of 32 oracles per request")
