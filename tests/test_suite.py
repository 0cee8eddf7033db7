"""`unlearnbench suite`: the grid shares one model store, a failing cell is recorded, bad input fails first."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from rich.console import Console

from tests.conftest import RunnerLifetimes, without_automatic_collection
from unlearnbench.cli import main
from unlearnbench.console import Reporter
from unlearnbench.grid import SuiteError
from unlearnbench.plan import expand_suite
from unlearnbench.report.leaderboard import ORACLE_LABEL, ORIGINAL_LABEL
from unlearnbench.runner import Runner
from unlearnbench.suite import run_suite

#: Cheaper than conftest's FAST_RECIPE: these tests count trained models, not their accuracy.
RECIPE = {"epochs": 2, "batch_size": 128, "lr": 0.1}


def tiny_suite(tmp_path, **changes) -> dict:
    suite = {
        "out": str(tmp_path / "runs"),
        "store": str(tmp_path / "store"),
        "common": {"requests": 2, "recipe": dict(RECIPE), "logger": "none", "accelerator": "cpu"},
        "methods": ["finetune", {"ga": {"optim": {"epochs": 1}}}],
        "streams": [{"stream": "classwise", "size": 1}],
        "seeds": [0],
    }
    suite.update(changes)
    return suite


def test_expand_suite_is_an_ordered_grid(tmp_path):
    suite = tiny_suite(tmp_path, seeds=[0, 1], streams=["classwise", {"stream": "random", "size": 0.05}])
    configs = expand_suite(suite)
    assert [(c.stream.kind, c.seeds.seed, c.method.name) for c in configs] == [
        (stream, seed, method) for stream in ("classwise", "random") for seed in (0, 1) for method in ("finetune", "ga")
    ]
    assert all(c.output.store == tmp_path / "store" and c.hardware.accelerator == "cpu" for c in configs)
    assert configs[1].method.args == {"optim": {"epochs": 1}} and configs[0].method.args == {}
    assert not (tmp_path / "runs").exists()


def test_settings_lead_the_grid_and_override_common(tmp_path):
    suite = tiny_suite(
        tmp_path,
        common={"requests": 2, "recipe": {"epochs": 2, "lr": 0.1}, "logger": "none", "accelerator": "cpu"},
        settings=[
            {"dataset": "digits"},
            {"dataset": "synthetic_cifar_mini", "requests": 3, "recipe": {"epochs": 1}, "devices": 2},
        ],
        streams=["classwise", {"stream": "random", "size": 0.05, "requests": 4}],
        seeds=[0, 1],
    )
    configs = expand_suite(suite)
    assert [(c.data.name, c.stream.kind, c.seeds.seed, c.method.name) for c in configs] == [
        (dataset, stream, seed, method)
        for dataset in ("digits", "synthetic_cifar_mini")
        for stream in ("classwise", "random")
        for seed in (0, 1)
        for method in ("finetune", "ga")
    ]
    digits, mini = configs[0], configs[8]
    assert (digits.stream.requests, digits.arch.recipe, digits.hardware.devices) == (2, {"epochs": 2, "lr": 0.1}, 1)
    assert (mini.stream.requests, mini.arch.recipe, mini.hardware.devices) == (3, {"epochs": 1, "lr": 0.1}, 2)
    assert mini.hardware.accelerator == "cpu" and mini.output.logger == "none"
    assert configs[12].stream.requests == 4  # a stream's own requests override the setting's
    assert not (tmp_path / "runs").exists()


def test_check_suite_names_the_run_directories_the_runners_use(tmp_path):
    from unlearnbench.plan import check_suite
    from unlearnbench.suite import prepare_suite

    suite = tiny_suite(tmp_path, settings=[{"requests": 2}, {"requests": 3}])
    cells = check_suite(suite)
    runners = prepare_suite(cells)
    assert len({cell.run_dir for cell in cells}) == 4
    assert [cell.run_dir for cell in cells] == [runner.run_dir.path for runner in runners]
    assert [cell.identity for cell in cells] == [runner.identity for runner in runners]
    assert not (tmp_path / "runs").exists()


def test_a_suite_plans_each_cell_once_and_builds_only_its_shards_runners(tmp_path, monkeypatch):
    from unlearnbench import plan
    from unlearnbench.runner import Runner
    from unlearnbench.suite import prepare_suite

    plans, built = [], []
    real_plan, real_init = plan.plan_run, Runner.__init__
    monkeypatch.setattr(plan, "plan_run", lambda config, *a, **k: plans.append(config) or real_plan(config, *a, **k))
    monkeypatch.setattr(
        Runner, "__init__", lambda self, cell_plan, *a: built.append(cell_plan) or real_init(self, cell_plan, *a)
    )
    cells = plan.check_suite(tiny_suite(tmp_path, settings=[{"requests": 2}, {"requests": 3}]))
    runners = prepare_suite(cells, shard=(2, 3))
    assert len(plans) == len(cells) == 4  # planned by the check alone: the Runner takes the cell's plan
    assert built == [cells[1].plan]  # cells k with k mod 3 == 1: the second only
    assert [runner.run_dir.path for runner in runners] == [cells[1].run_dir]


def test_the_cells_of_a_suite_share_each_loaded_dataset(tmp_path, monkeypatch):
    from unlearnbench.plan import check_suite
    from unlearnbench.registry import DATASETS
    from unlearnbench.suite import prepare_suite

    loads: list[str] = []
    real_get = DATASETS.get

    def counting_get(name: str):
        factory = real_get(name)
        return lambda **kwargs: (loads.append(name), factory(**kwargs))[1]

    monkeypatch.setattr(DATASETS, "get", counting_get)
    mini = {"dataset": "synthetic_cifar_mini", "recipe": {"momentum": 0.9, "weight_decay": 5e-4}}  # no recipe file
    suite = tiny_suite(tmp_path, settings=[{"dataset": "digits"}, mini], seeds=[0, 1])
    runners = prepare_suite(check_suite(suite))
    assert loads == ["digits", "synthetic_cifar_mini"]  # 8 cells, one load per dataset
    assert len({id(runner.dataset) for runner in runners}) == 2
    assert {id(runner.dataset) for runner in runners[:4]} == {id(runners[0].dataset)}


def test_a_finished_cells_runner_is_freed_before_the_next_cell_runs(tmp_path, monkeypatch):
    """A suite's memory does not grow with its cells: each finished cell's runner and method (the method holds the
    model it fitted and its last Trainer; with the runner's data views, 12 MB a cell of the memorizing tier),
    reference cycles included, are gone when the next cell starts, not kept to the end of the suite (by the suite's
    plan of its cells, say) nor left to a rare full collection; a failing cell's too."""
    from unlearnbench import suite as suite_module

    lifetimes, run_cell = RunnerLifetimes(), suite_module._run_cell

    def run_cell_failing_once(runner, i, cells, reporter, writes):
        if runner.config.method.name == "ga" and runner.config.seeds.seed == 1:
            runner.run = lambda: 1 / 0  # a failing cell: recorded, its runner freed all the same
        return run_cell(runner, i, cells, reporter, writes)

    monkeypatch.setattr(suite_module, "_run_cell", lifetimes.watched(run_cell_failing_once))
    # (one pretrained model, no oracles, no single-shot serves: the runners are measured, not what they train)
    common = tiny_suite(tmp_path)["common"] | {"oracle": "none", "single_shot_every": 0, "train_seed": 0}
    with without_automatic_collection():
        result = run_suite(tiny_suite(tmp_path, seeds=[0, 1], leaderboard=False, common=common))
    assert len(result.cells) == 4 and [c.status for c in result.cells].count("failed") == 1
    assert lifetimes.alive_at_start == [0] * 4


def test_suite_shares_the_store_records_failures_and_resumes(tmp_path, monkeypatch):
    suite = tiny_suite(tmp_path)
    original = Runner.serve

    def serve(self, request):
        if self.config.method.name == "ga":
            raise RuntimeError("simulated failure")
        return original(self, request)

    with monkeypatch.context() as patch:
        patch.setattr(Runner, "serve", serve)
        first = run_suite(suite)
    assert [cell.status for cell in first.cells] == ["complete", "failed"]
    assert first.trained == 1 + 2  # the pretrained model and T = 2 oracles, for both methods
    failed = first.cells[1].run_dir
    assert "simulated failure" in json.loads((failed / "error.json").read_text())["error"]
    markdown = first.leaderboard.files["md"].read_text()
    assert "failed after 0/2" in markdown
    record = json.loads((tmp_path / "runs" / "suite.json").read_text())
    assert [cell["status"] for cell in record["cells"]] == ["complete", "failed"]

    log = io.StringIO()  # not a terminal: plain lines, no animation, no escape codes
    second = run_suite(suite, Reporter(console=Console(file=log, force_terminal=False, width=120)))
    output = log.getvalue()
    assert "suite cell 2/2: ga" in output and "run ga-classwise" in output and "unlearning 2/2: done in" in output
    assert "\x1b[" not in output and "\r" not in output
    assert second.trained == 0
    assert [cell.status for cell in second.cells] == ["already complete", "complete"]
    assert not (failed / "error.json").exists()
    (group,) = second.leaderboard.groups
    # one epoch: finetune's default, not ga's, so ga's label names it
    assert [entry.label for entry in group.rows] == [ORACLE_LABEL, ORIGINAL_LABEL, "finetune", "ga (optim.epochs=1)"]
    assert all(entry.n == 1 for entry in group.rows)
    assert second.leaderboard.files["html"].stat().st_size > 0


BAD_SUITES = [
    ({"methods": ["finetune", "nope"]}, "unknown method 'nope'"),
    ({"methods": ["finetune", {"ga": {"epochz": 1}}]}, "has no argument(s) epochz"),
    ({"streams": [{"stream": "classwise", "size": 1}, {"stream": "classwise", "requests": 20}]}, "requests x size"),
    ({"common": {"requests": 2, "colour": "red"}}, "unknown key(s) colour in `common`; valid: accelerator, arch"),
    ({"settings": [{}, {"arch": "smallcnn", "colour": "red"}]}, "unknown key(s) colour in `settings` entry 2; valid:"),
    ({"settings": {"dataset": "digits"}}, "`settings` must be a non-empty list"),
    ({"settings": [{"recipe": 3}]}, "`recipe` in `settings` entry 1 must be a mapping"),
    (
        {"settings": [{}, {"accelerator": "cpu", "devices": 1}]},
        "cell 3/4 (digits/smallcnn, finetune, classwise, seed 0) is the same run as cell 1",
    ),
    ({"settings": [{"data_dir": "a"}, {"data_dir": "b", "requests": 3}]}, "dataset 'digits' is read from 2 folders"),
    (
        {"methods": [{"ga": {"optim": {"lr": "1e-4"}}}]},
        "argument optim.lr must be a number, got '1e-4' (YAML reads 1e-4 as text",
    ),
    (
        {"common": {"dataset": "synthetic_cifar_mini", "recipe": {"epochs": 2}}},
        "no recipe unlearnbench/recipes/synthetic_cifar_mini-smallcnn.yaml",
    ),
    ({"seeds": "0"}, "`seeds` must be a non-empty list"),
    ({"methods": ["finetune", "finetune"]}, "same run as cell 1"),
    ({"extra": 1}, "unknown suite key(s) extra"),
    ({"common": {"logger": "tensorboard"}}, "unknown logger 'tensorboard'"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_SUITES, ids=[m for _, m in BAD_SUITES])
def test_invalid_suite_fails_before_anything_is_written(tmp_path, capsys, changes, message):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(tiny_suite(tmp_path, **changes)))
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]


@pytest.mark.parametrize("count", [1, 3, 7])
def test_shards_split_the_grid_into_disjoint_parts_that_cover_it(count):
    from unlearnbench.grid import select_shard

    cells = list(range(20))
    shards = [select_shard(cells, (index, count)) for index in range(1, count + 1)]
    assert sorted(cell for shard in shards for cell in shard) == cells
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert select_shard(cells, None) == cells


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "2"])
def test_a_bad_shard_is_refused(text):
    from unlearnbench.grid import SuiteError, parse_shard

    with pytest.raises(SuiteError, match="i/n"):
        parse_shard(text)


def test_a_suite_runs_guarded_methods_beside_unguarded_ones(tmp_path):
    """`guards:` in a setting or a method's long form gives the same runs as `run --guard`."""
    suite = tiny_suite(
        tmp_path,
        methods=[
            {"finetune": {"optim": {"epochs": 1}}},
            {"method": "finetune", "args": {"optim": {"epochs": 1}}, "guards": [{"shrink_perturb": {"shrink": 0.5}}]},
        ],
    )
    configs = expand_suite(suite)
    assert [(c.options()["guards"], c.options()["guard_args"]) for c in configs] == [
        ([], {}),
        (["shrink_perturb"], {"shrink_perturb": {"shrink": 0.5}}),
    ]
    result = run_suite(suite)
    assert [cell.status for cell in result.cells] == ["complete", "complete"]
    names = sorted(cell.run_dir.name.split("-")[0] for cell in result.cells)
    assert names == ["finetune", "finetune+shrink_perturb"]
    guarded = yaml.safe_load((result.cells[1].run_dir / "config.yaml").read_text())
    assert guarded["guards"][0]["shrink_perturb"]["shrink"] == 0.5
    (group,) = result.leaderboard.groups
    assert sorted(entry.label for entry in group.entries) == [
        "finetune (optim.epochs=1)",
        "finetune+shrink_perturb (optim.epochs=1)",
    ]


def test_a_settings_guards_apply_to_its_methods_and_a_methods_own_replace_them(tmp_path):
    suite = tiny_suite(
        tmp_path,
        common={"requests": 2, "guards": ["orthogonal"]},
        methods=["finetune", {"method": "ga", "guards": []}],
    )
    assert [c.guard_names for c in expand_suite(suite)] == [["orthogonal"], []]
    with pytest.raises(SuiteError, match="`guards` of `common` must be a list"):
        expand_suite(tiny_suite(tmp_path, common={"guards": "orthogonal"}))


#: A value other than the default for every `run` option; the test below fails for an option missing here.
OPTION_VALUES = {
    "method": "ga",
    "stream": "random",
    "dataset": "cifar10",
    "data_dir": "some/data",
    "download": True,
    "arch": "resnet18",
    "requests": 3,
    "size": 2,  # with the default 5 requests: 10 of digits' 10 classes, so the suite sets requests beside it
    "seed": 4,
    "train_seed": 5,
    "unlearn_seed": 6,
    "stream_seed": 7,
    "oracle": "none",
    "oracle_every": 2,
    "single_shot_every": 0,
    "single_shot_baseline": "cumulative",
    "oracle_seeds": 3,
    "relearn_every": 2,
    "relearn_steps": 50,
    "relearn_fraction": 0.25,
    "relearn_margin": 0.1,
    "quantize_every": 2,
    "quantize_bits": [4],
    "out": "elsewhere",
    "store": "a-store",
    "save_logits": True,
    "accelerator": "cpu",
    "devices": 2,
    "strategy": "ddp",
    "num_nodes": 2,
    "precision": "bf16-mixed",
    "logger": "none",
    "recipe": {"epochs": 3, "lr": 0.2, "batch_size": 32, "momentum": 0.8, "weight_decay": 0.0},
    "guards": ["orthogonal"],
    "dataset_args": {"train_size": 1000},
    "arch_args": {"width": 16},
    "mia_protocol": "loft",
    "hparams": "tuned",
}
#: `run` options that are not a cell's: the suite file is the config, a cell's run directory is named
#: by its identity, and `--quiet` belongs to the `suite` command.
NOT_PER_CELL = {"config", "run_dir", "quiet"}
#: Every recipe key, so that any (dataset, arch) resolves in a suite without a recipe file.
FULL_RECIPE = {"epochs": 2, "lr": 0.1, "batch_size": 128, "momentum": 0.9, "weight_decay": 5e-4}


def _option_value(config, option: str):
    return config.options()[option]


def test_a_suite_cell_is_typed_by_runs_parser_and_names_the_run_the_command_line_names(tmp_path):
    """A cell's options go through `run`'s own parser (`run_options.config_of_options`): a YAML `lr: 1` is the float
    the method's signature declares, as `--ga.optim.lr 1` is, so both name one run (they named two folders when a
    cell's values were taken as YAML typed them); a value the parser refuses and no check of ours names is refused
    in the parser's words, for the cell; devices may be a list, as Lightning takes them."""
    from unlearnbench.cli import parse_run_args, run_config
    from unlearnbench.plan import check_suite, resolve_run

    common = {"recipe": FULL_RECIPE, "devices": [0]}
    (cell,) = check_suite({"out": str(tmp_path), "common": common, "methods": [{"ga": {"optim": {"lr": 1}}}]})
    argv = ["--method", "ga", "--ga.optim.lr", "1", "--out", str(tmp_path), "--recipe", json.dumps(FULL_RECIPE)]
    assert resolve_run(run_config(parse_run_args(argv)))[1] == cell.run_dir
    assert cell.config.method.args == {"optim": {"lr": 1.0}} and isinstance(
        cell.config.method.args["optim"]["lr"], float
    )
    assert cell.config.hardware.devices == [0]
    with pytest.raises(SuiteError, match=r"cell 1/1 \(digits/smallcnn, salun.*hold"):
        check_suite({"out": str(tmp_path), "common": common, "methods": [{"salun": {"hold": "nothing"}}]})


def test_every_run_option_is_a_suite_key_with_the_same_identity(tmp_path):
    """Introspects `run`'s parser: each option, on the command line or in a suite cell, resolves alike."""
    from unlearnbench.cli import parse_run_args, run_config, run_parser
    from unlearnbench.plan import check_suite, resolve_run

    parser = run_parser("rl", ["orthogonal"])
    options = {action.dest.split(".")[0] for action in parser._actions if action.option_strings}
    options -= {"help", "print_config", "rl", "orthogonal"}  # the method's and guard's argument groups
    tuned = tmp_path / "tuned"  # a folder of `unlearnbench tune` files for the `hparams` option
    tuned.mkdir()
    (tuned / "digits-smallcnn-classwise-rl.yaml").write_text(
        yaml.safe_dump({"hparams": {"lr": 0.02}, "provenance": {"objective": "mean_gap", "trials": 2}})
    )
    assert options - NOT_PER_CELL == set(OPTION_VALUES), "give the new option a value in OPTION_VALUES"
    for option, value in OPTION_VALUES.items():
        text = value if isinstance(value, str) else json.dumps(value)
        argv = ["--method", "rl", "--out", str(tmp_path / "runs"), "--recipe", json.dumps(FULL_RECIPE)]
        if option in ("dataset_args", "arch_args"):  # `--dataset.train_size 1000` on the command line
            for key, item in value.items():
                argv += [f"--{option.removesuffix('_args')}.{key}", str(item)]
        else:
            argv += [f"--{option}", str(tmp_path / text) if option in ("out", "store", "hparams") else text]
        suite = {"out": str(tmp_path / "runs"), "common": {"recipe": FULL_RECIPE}, "methods": ["rl"]}
        if option == "method":
            suite["methods"] = [value]
        elif option == "seed":
            suite["seeds"] = [value]
        elif option in ("stream", "size", "requests"):
            suite["streams"] = [{option: value, "requests": OPTION_VALUES["requests"]}]
            argv += ["--requests", str(OPTION_VALUES["requests"])]
        elif option in ("out", "store"):
            suite[option] = str(tmp_path / value)
        elif option == "hparams":
            suite["common"] = {**suite["common"], option: str(tmp_path / value)}
        else:
            suite["common"] = {**suite["common"], option: value}
        cli_config = run_config(parse_run_args(argv))
        (cell,) = check_suite(suite)
        if option not in ("dataset_args", "arch_args"):  # the command line fills a group's defaults; the identity
            assert _option_value(cell.config, option) == _option_value(cli_config, option), option  # holds them all
        assert (cell.identity, cell.run_dir) == resolve_run(cli_config), option
