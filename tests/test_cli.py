"""The command line: bad input is one line and exit 2 with nothing written (the README's examples: test_docs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from yaml import safe_dump as yaml_dump

from tests.conftest import FAST_RECIPE
from unlearnbench import known_arguments
from unlearnbench.cli import main
from unlearnbench.registry import METHODS
from unlearnbench.runner import Runner

ROOT = Path(__file__).resolve().parent.parent

BAD_INPUT = [
    (["run", "--method", "nope"], "unknown method 'nope'; choose one of: "),
    (["run", "--method", "ga", "--stream", "sideways"], "unknown stream 'sideways'; choose one of: classwise"),
    (
        ["run", "--method", "ga", "--dataset", "mnist9"],
        "unknown dataset 'mnist9'; choose one of: cifar10, cifar100, digits",
    ),
    (["run", "--method", "ga", "--arch", "vgg99"], "unknown arch 'vgg99'; choose one of: "),
    (["run", "--method", "ga", "--requests", "10"], "requests x size < 10 classes"),
    (["run", "--method", "ga", "--requests", "0"], "requests must be >= 1"),
    (["run", "--method", "ga", "--stream", "random", "--size", "1.5"], "fraction in (0, 1)"),
    (["run", "--method", "ga", "--stream", "random", "--requests", "20", "--size", "0.1"], "requests x size < 1"),
    (["run", "--method", "ga", "--ga.foo", "1"], "unrecognized arguments: --ga.foo"),
    (["run", "--method", "salun", "--salun.ratio", "half"], "salun.ratio"),
    (["run", "--method", "ga", "--oracle", "maybe"], "unknown oracle 'maybe'"),
    (["run", "--method", "ga", "--recipe", '{"epochz": 3}'], "unknown recipe key(s) epochz"),
    (["run"], "method"),
    (["fly"], "unknown command 'fly'; choose one of: run, list"),
    (["list", "extra"], "list takes no arguments"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_nothing_written(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path / "out")] if argv[0] == "run" and len(argv) > 1 else argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("unlearnbench: error: "), err
    assert message.lower() in err.lower(), err  # (jsonargparse capitalized its messages after 4.35)
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SystemExit):
        main(["run", "--method", "ga", "--out", str(target)])
    assert "is not a directory" in capsys.readouterr().err


def test_config_file_and_command_line_set_method_arguments(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("method: salun\nrequests: 0\nsalun:\n  ratio: 0.25\n")
    with pytest.raises(SystemExit):
        main(["run", "--config", str(config), "--out", str(tmp_path / "out")])
    assert "requests must be >= 1" in capsys.readouterr().err
    config.write_text("method: salun\nsalun:\n  ratioo: 0.25\n")
    with pytest.raises(SystemExit):
        main(["run", "--config", str(config), "--out", str(tmp_path / "out")])
    assert "ratioo" in capsys.readouterr().err


def test_a_config_file_is_read_once_by_a_command(tmp_path, capsys, monkeypatch):
    """The early checks, the choice of method and guards and the retired spellings' check each look into a --config
    file; the command reads it once for all of them (jsonargparse reads it again for the parse itself), and the next
    command reads it anew."""
    import unlearnbench.cli

    reads = []
    read = unlearnbench.cli._config_options
    monkeypatch.setattr(unlearnbench.cli, "_config_options", lambda path: reads.append(path) or read(path))
    config, target = tmp_path / "run.yaml", tmp_path / "file"
    config.write_text("method: salun\nguards: [ewc]\nsalun:\n  ratio: 0.3\n")
    target.write_text("x")
    for _ in range(2):
        with pytest.raises(SystemExit):  # refused after the parse: --out is a file
            main(["run", "--config", str(config), "--out", str(target)])
        assert "is not a directory" in capsys.readouterr().err
    assert reads == [str(config)] * 2


#: A --config file's section of an argument group that is no mapping, and what `run` says of it.
NOT_A_MAPPING = [
    ("method: salun\nsalun: 3\n", "salun in --config must be a mapping of its arguments to values (its arguments: "),
    ("method: salun\nsalun: [1]\n", "salun in --config must be a mapping of its arguments to values"),
    ("method: ga\ndataset_args: 3\n", "dataset_args in --config must be a mapping of its arguments to values"),
    ("method: ga\narch_args: x\n", "arch_args in --config must be a mapping of its arguments to values"),
    ("method: ga\nguards: [ewc]\newc: 3\n", "(its arguments: ewc_lambda), got 3"),
]


@pytest.mark.parametrize(("config", "message"), NOT_A_MAPPING, ids=[c for c, _ in NOT_A_MAPPING])
def test_a_config_section_of_a_group_that_is_no_mapping_is_one_line(config, message, tmp_path, capsys):
    """The parser takes `salun: 3` as the group's value; reading it as the method's arguments was a TypeError."""
    (tmp_path / "run.yaml").write_text(config)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_list_prints_every_registered_name(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in METHODS.names())


@pytest.mark.slow
def test_cli_run_end_to_end_then_resume_says_complete(tmp_path):
    argv = [
        sys.executable, "-m", "unlearnbench.cli", "run", "--method", "finetune", "--requests", "2",
        "--finetune.optim.epochs", "1", "--recipe", str(FAST_RECIPE).replace("'", '"'), "--out", str(tmp_path),
    ]  # fmt: skip
    first = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "run directory:" in first.stdout and "summary" in first.stdout
    assert "Traceback" not in first.stderr
    second = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "already finished" in second.stdout


@pytest.mark.slow
def test_cli_bad_input_in_a_real_process_has_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "unlearnbench.cli", "run", "--method", "salun", "--requests", "99"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_resumed_run_raises_none_of_lightnings_false_warnings(tmp_path, shared_store, monkeypatch):
    """Lightning warns on every fit that modules are in eval mode (the model arrives from evaluation in
    eval mode; frozen teachers stay so) and, on resume, that the killed session's step logs will be
    deleted (they are being redone). Each is silenced by its message only: other warnings still show."""
    import os
    import signal
    import time
    import warnings

    argv = ["run", "--method", "finetune", "--requests", "2", "--finetune.optim.epochs", "1", "--recipe"]
    argv += [json.dumps(FAST_RECIPE), "--out", str(tmp_path / "out"), "--store", str(shared_store)]
    original = Runner.serve

    def killed_in_request_1(self, request):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    monkeypatch.setattr(Runner, "serve", killed_in_request_1)
    assert main(argv) == 130  # the csv logger's folder of this session exists, its steps not yet written
    monkeypatch.setattr(Runner, "serve", original)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
        warnings.warn("a warning of the run's own", UserWarning, stacklevel=1)
    messages = [str(warning.message) for warning in caught]
    assert not [m for m in messages if "in eval mode" in m or "will be deleted" in m], messages
    assert "a warning of the run's own" in messages


@pytest.mark.slow
def test_quiet_prints_nothing_but_errors(tmp_path, shared_store, capfd):
    argv = [
        "run",
        "--method",
        "salun",
        "--requests",
        "2",
        "--salun.optim.epochs",
        "1",
        "--recipe",
        json.dumps(FAST_RECIPE),
    ]
    argv += ["--out", str(tmp_path / "out"), "--store", str(shared_store), "--quiet", "true"]
    assert main(argv) == 0
    assert capfd.readouterr() == ("", "")
    with pytest.raises(SystemExit):
        main([*argv, "--salun.ratio", "2"])
    assert capfd.readouterr() == (
        "",
        "unlearnbench: error: method 'salun' argument ratio must satisfy 0 < ratio <= 1, got 2.0\n",
    )


# ------------------------------------------------------------------------ refused before torch is imported

EARLY_REFUSALS = [
    (["--method", "nope"], "unknown method 'nope'; choose one of: "),
    (["--method", "ga", "--stream", "sideways"], "unknown stream 'sideways'"),
    (["--method", "ga", "--dataset", "mnist9"], "unknown dataset 'mnist9'"),
    (["--method", "ga", "--arch", "vgg99"], "unknown arch 'vgg99'; choose one of: "),
    (["--method", "ga", "--arch", "timm:x/../.."], "arch name 'timm:x/../..' holds a path separator"),
    (["--method", "ga", "--logger", "paper"], "unknown logger 'paper'"),
    (["--method", "ga", "--guard", "wall"], "unknown guard 'wall'"),
    (["--method", "ga", "--requests", "0"], "requests must be >= 1, got 0"),
    (["--method", "ga", "--requests=-2"], "requests must be >= 1, got -2"),
    (["--method", "ga", "--oracle-every", "0"], "oracle_every must be a whole number >= 1"),
    (["--method", "ga", "--single_shot_every", "-1"], "single_shot_every must be a whole number >= 0"),
    (["--method", "ga", "--train-seed", "-1"], "train_seed must be a whole number >= 0"),
    (["--method", "ga", "--oracle_seeds", "0"], "oracle_seeds must be a whole number >= 1"),
    (["--method", "ga", "--size", "0"], "size must be a finite number > 0"),
    (["--method", "ga", "--size", "nan"], "size must be a finite number > 0"),
    (["--method", "ga", "--data-dir", "{tmp}/nowhere"], "--data-dir {tmp}/nowhere does not exist"),
    (["--method", "ga", "--data_dir", "{tmp}/file"], "is not a folder"),
    (["--method", "ga", "--config", "{tmp}/broken.yaml"], "cannot read config"),
    (["--method", "ga", "--config", "{tmp}/list.yaml"], "must be a YAML mapping"),
    (["--method", "ga", "--config", "{tmp}/zero.yaml"], "requests must be >= 1, got 0"),
    (["--config", "{tmp}/method.yaml", "--requests", "0"], "requests must be >= 1, got 0"),
    (["--method", "ga", "--requests", "3", "--config", "{tmp}/zero.yaml"], "requests must be >= 1"),  # later wins
    # the parser's own refusals of `run`'s own options: misspelt, unknown, of the wrong type, of a group not there
    (["--method", "ga", "--reqests", "2"], "unrecognized arguments: --reqests 2"),
    (["--method", "ga", "--request", "2"], "unrecognized arguments: --request 2"),
    (["--method", "ga", "--out", "o", "stray"], "unrecognized arguments: stray"),
    (["--method", "ga", "--size", "null", "--requests", "x"], 'Parser key "requests": Expected a'),
    (["--method", "ga", "--download", "maybe"], 'Parser key "download": Expected a'),
    (["--method", "ga", "--salun.ratio", "0.3"], "unrecognized arguments: --salun.ratio 0.3"),
    (["--method", "ga", "--ewc.ewc_lambda", "1"], "unrecognized arguments: --ewc.ewc_lambda 1"),  # no --guard ewc
    (["--config", "{tmp}/method.yaml", "--trials", "3"], "unrecognized arguments: --trials 3"),
    (["--requests", "2"], "the following arguments are required: method"),
    (["--method", "ga", "--oracle", "sometimes"], "unknown oracle 'sometimes'; choose one of: retrain, none"),
    (["--method", "ga", "--mia-protocol", "x"], "unknown mia_protocol 'x'; choose one of: salun, loft"),
    (["--method", "ga", "--single-shot-baseline", "x"], "unknown single_shot_baseline 'x'; choose one of: "),
    (["--method", "ga", "--config", "{tmp}/oracle.yaml"], "unknown oracle 'sometimes'"),
    (["--method", "ga", "--recipe", '{"epochs": -1}'], "recipe key epochs must be >= 1, got -1"),
    (["--method", "ga", "--recipe", "{epoch: 2}"], "unknown recipe key(s) epoch; valid: epochs, lr, "),
    (["--method", "ga", "--recipe", "{lr: .nan}"], "recipe key lr must be finite"),
    # the groups of the built-in classes (`known_arguments`), in the words of the full parse and validation
    (["--method", "salun", "--salun.ratio", "2"], "method 'salun' argument ratio must satisfy 0 < ratio <= 1, got 2.0"),
    (
        ["--method", "salun", "--salun.optim.lr", "-1"],
        "method 'salun' argument optim.lr must satisfy optim.lr > 0, got -1.0",
    ),
    (["--method", "salun", "--salun.optim.epochs=0"], "method 'salun' argument optim.epochs must be >= 1, got 0"),
    (["--method", "salun", "--salun.nope", "1"], "unrecognized arguments: --salun.nope 1"),
    (["--method", "salun", "--salun.optim.nope", "1"], "unrecognized arguments: --salun.optim.nope 1"),
    (["--method", "salun", "--salun.ratio", "abc"], "Parser key \"salun.ratio\": Expected a <class 'float'>"),
    (["--method", "salun", "--salun.hold", "x"], 'Parser key "salun.hold": Expected a typing.Literal['),
    (["--method", "salun", "--salun.lr", "0.1"], "method 'salun' takes lr among its optim settings"),
    (["--config", "{tmp}/salun.yaml", "--salun.ratio", "2"], "ratio must satisfy 0 < ratio <= 1, got 2.0"),
    (["--method", "ga", "--guard", "ewc", "--ewc.ewc_lambda", "abc"], 'Parser key "ewc.ewc_lambda": Expected a'),
    (["--method", "ga", "--guard", "ewc", "--ewc.nope", "1"], "unrecognized arguments: --ewc.nope 1"),
    (["--method", "ga", "--dataset_args.test_size", "1"], "dataset argument test_size=1 is fewer than digits's 10"),
    (["--method", "ga", "--dataset.train_size", "0"], "dataset argument train_size must be a whole number >= 1"),
    (["--method", "ga", "--dataset_args.nope", "1"], "unrecognized arguments: --dataset_args.nope 1"),
    (["--method", "ga", "--dataset", "mnist", "--dataset_args.test_size", "20000"], "exceeds the 10000 samples"),
    (["--method", "ga", "--arch_args.width", "0"], "arch argument width must be a whole number >= 1, got 0"),
    (["--method", "ga", "--arch", "mlp", "--arch_args.pools", "1"], "unrecognized arguments: --arch_args.pools 1"),
    # a group given whole, or in a --config file's section
    (
        ["--method", "salun", "--salun", '{"ratio": 3}'],
        "method 'salun' argument ratio must satisfy 0 < ratio <= 1, got 3.0",
    ),
    (
        ["--method", "salun", "--salun.optim", "{lr: -1}"],
        "method 'salun' argument optim.lr must satisfy optim.lr > 0, got -1.0",
    ),
    (["--method", "salun", "--salun", "{nope: 1}"], "Group 'salun' does not accept option 'nope'"),
    (["--method", "ga", "--guard", "ewc", "--ewc", "{ewc_lambda: x}"], 'Parser key "ewc.ewc_lambda": Expected a'),
    (["--config", "{tmp}/salun3.yaml"], "method 'salun' argument ratio must satisfy 0 < ratio <= 1, got 3.0"),
    (["--config", "{tmp}/salun3.yaml", "--salun.ratio", "0.3", "--salun.optim", "{epochs: 0}"], "epochs must be >= 1"),
    (["--method", "ga", "--config", "{tmp}/test_size.yaml"], "dataset argument test_size=1 is fewer than digits's 10"),
    (["--config", "{tmp}/scalar.yaml"], "salun in --config must be a mapping of its arguments to values (its "),
    (["--config", "{tmp}/optim.yaml"], "optim of method 'salun' must be a mapping of lr, epochs, batch_size, "),
    # the words Lightning takes, as `known_arguments.json` records them of the installed version
    (["--method", "ga", "--accelerator", "tpuu"], "unknown accelerator 'tpuu'; choose one of: auto, gpu, cpu, "),
    (["--method", "ga", "--strategy", "nope"], "unknown strategy 'nope'; choose one of: auto, ddp, "),
    (["--method", "ga", "--precision", "99"], "unknown precision '99'; choose one of: 64, 32, 16, "),
    (["--method", "ga", "--config", "{tmp}/precision.yaml"], "unknown precision 'half'; choose one of: "),
    # the stream against the dataset's declared size (`early_checks.check_stream_size`)
    (["--method", "ga", "--requests", "11"], "classwise stream needs requests x size < 10 classes so that some "),
    (["--method", "ga", "--config", "{tmp}/eleven.yaml"], "classwise stream needs requests x size < 10 classes"),
    (["--method", "ga", "--stream", "random", "--size", "0.5", "--requests", "2"], "random stream needs requests x "),
    (["--method", "ga", "--stream", "random", "--dataset_args.train_size", "20", "--size", "0.01"], "less than one"),
]


@pytest.mark.parametrize(("argv", "message"), EARLY_REFUSALS, ids=[" ".join(a) for a, _ in EARLY_REFUSALS])
def test_bad_run_options_are_refused_before_torch_and_lightning_are_imported(argv, message, tmp_path):
    """A refused input costs well under 2 s (benchmarks/perf.py S3) because nothing heavy is imported for it."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "broken.yaml").write_text("requests: [1\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "zero.yaml").write_text("requests: 0\n")
    (tmp_path / "method.yaml").write_text("method: finetune\n")
    (tmp_path / "oracle.yaml").write_text("oracle: sometimes\n")
    (tmp_path / "salun.yaml").write_text("method: salun\n")
    (tmp_path / "eleven.yaml").write_text("requests: 11\n")
    (tmp_path / "precision.yaml").write_text("precision: half\n")
    (tmp_path / "salun3.yaml").write_text("method: salun\nsalun: {ratio: 3}\n")
    (tmp_path / "test_size.yaml").write_text("dataset_args: {test_size: 1}\n")
    (tmp_path / "scalar.yaml").write_text("method: salun\nsalun: 3\n")
    (tmp_path / "optim.yaml").write_text("method: salun\nsalun: {optim: 3}\n")
    argv = ["run", *(arg.replace("{tmp}", str(tmp_path)) for arg in argv), "--out", str(tmp_path / "out")]
    _skip_hardware_words_under_another_lightning(message)
    _assert_refused_before_torch(argv, message.replace("{tmp}", str(tmp_path)), tmp_path)


def _skip_hardware_words_under_another_lightning(message: str) -> None:
    """The words `--accelerator`, `--strategy` and `--precision` take are judged early only under the Lightning
    `known_arguments.json` read them from; under another (a newer release on a fresh machine) the full check judges
    them, in the same words (test_known_arguments' test of both branches)."""
    hardware = message.startswith(("unknown accelerator", "unknown strategy", "unknown precision"))
    if hardware and known_arguments.hardware_choices() is None:
        pytest.skip("the installed Lightning is not the one known_arguments.json recorded the hardware words of")


def _assert_refused_before_torch(argv: list[str], message: str, tmp_path: Path) -> None:
    """`unlearnbench ARGV` exits 2 with one line holding `message`, writes no `out` folder and imports no heavy
    library (a refusal costs well under 2 s: benchmarks/perf.py S3, S4)."""
    probe = (
        "import sys\nfrom unlearnbench.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as exit:\n    code = exit.code\n"
        "heavy = sorted(m for m in ('torch', 'lightning', 'timm', 'sklearn') if m in sys.modules)\n"
        "print(code, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}
    )
    assert result.stdout.strip() == "2 []", result.stdout + result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


#: A suite file's content (its cells are partial runs) and what `unlearnbench suite` says of it.
SUITE_REFUSALS = [
    ({"methods": ["nope"]}, "cell 1/1 (digits/smallcnn, nope, classwise, seed 0): unknown method 'nope'"),
    ({"methods": ["ga"], "common": {"requests": 0}}, "requests must be >= 1, got 0"),
    ({"methods": ["ga"], "streams": [{"stream": "sideways"}]}, "unknown stream 'sideways'"),
    ({"methods": ["ga"], "settings": [{}, {"dataset": "mnist9"}]}, "cell 2/2 (mnist9/smallcnn, ga, "),
    ({"methods": [{"method": "ga", "guards": ["wall"]}]}, "unknown guard 'wall'"),
    ({"methods": ["ga"], "seeds": [0, 1], "common": {"train_seed": -1}}, "train_seed must be a whole number >= 0"),
    ({"methods": ["ga"], "common": {"logger": "paper"}}, "unknown logger 'paper'"),
    ({"methods": ["ga"], "extra": 1}, "unknown suite key(s) extra"),
    ({"methods": ["ga"], "common": {"oracle": "sometimes"}}, "unknown oracle 'sometimes'; choose one of: "),
    ({"methods": ["ga"], "common": {"recipe": {"batch_size": 0}}}, "recipe key batch_size must be >= 1, got 0"),
    ("methods: [ga\n", "cannot read suite"),
]


@pytest.mark.parametrize(("suite", "message"), SUITE_REFUSALS, ids=[m for _, m in SUITE_REFUSALS])
def test_bad_suites_are_refused_before_torch_and_lightning_are_imported(suite, message, tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(suite if isinstance(suite, str) else yaml_dump({**suite, "out": str(tmp_path / "out")}))
    _assert_refused_before_torch(["suite", str(path), "--check"], message, tmp_path)


#: `suite`'s own options and what it says of them.
SUITE_OPTION_REFUSALS = [
    (["--chec", "true"], "unrecognized arguments: --chec true"),
    (["--quiet", "maybe"], 'Parser key "quiet": Expected a'),
    (["--shard", "3/2"], "--shard takes i/n with 1 <= i <= n"),
    (["--logger", "paper"], "unknown logger 'paper'"),
]


@pytest.mark.parametrize(
    ("argv", "message"), SUITE_OPTION_REFUSALS, ids=[" ".join(a) for a, _ in SUITE_OPTION_REFUSALS]
)
def test_bad_suite_options_are_refused_before_torch_and_lightning_are_imported(argv, message, tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml_dump({"methods": ["ga"], "out": str(tmp_path / "out")}))
    _assert_refused_before_torch(["suite", str(path), *argv], message, tmp_path)


TUNE_REFUSALS = [
    (["--method", "nope"], "unknown method 'nope'; choose one of: "),
    (["--method", "ga", "--stream", "sideways"], "unknown stream 'sideways'"),
    (["--method", "ga", "--arch", "vgg99"], "unknown arch 'vgg99'"),
    (["--method", "ga", "--requests", "0"], "requests must be >= 1, got 0"),
    (["--method", "ga", "--size", "-1"], "size must be a finite number > 0"),
    (["--method", "ga", "--data-dir", "{tmp}/nowhere"], "does not exist"),
    (["--suite", "{tmp}/nope.yaml"], "tune study of nope on classwise: unknown method 'nope'"),
    (["--suite", "{tmp}/zero.yaml"], "tune study of ga on random: requests must be >= 1, got 0"),
    (["--suite", "{tmp}/broken.yaml"], "cannot read suite"),
    (["--method", "ga", "--trial", "3"], "unrecognized arguments: --trial 3"),
    (["--method", "ga", "--trials", "abc"], 'Parser key "trials": Expected a'),
    (["--method", "ga", "--trials", "0"], "--trials must be at least 1, got 0"),
    (["--method", "ga", "--objective", "best"], "unknown objective 'best'; choose one of: mean_gap, final_gap"),
    (["--method", "ga", "--sampler", "grid"], "unknown sampler 'grid'; choose one of: tpe, nsga2"),
    (["--method", "ga", "--tune-seeds", "0,100"], "tuning seed(s) [0] are evaluation seeds"),
    (["--method", "ga", "--tune-seeds", "a"], "--tune-seeds takes comma-separated integers"),
    (["--method", "ga", "--recipe", "{epochs: 0}"], "recipe key epochs must be >= 1, got 0"),
    (["--method", "ga", "--accelerator", "tpuu"], "unknown accelerator 'tpuu'; choose one of: auto, gpu, cpu, "),
    (["--method", "ga", "--precision", "99"], "unknown precision '99'; choose one of: 64, 32, 16, "),
    (["--method", "ga", "--requests", "11"], "classwise stream needs requests x size < 10 classes so that some "),
    (["--method", "ga", "--stream", "random", "--size", "0.0004"], "random size 0.0004 of 1150 train samples is "),
]

#: Streams a tune study's early check judges against a built-in dataset (`cli._check_builtin_stream_size`): on its train
#: split, on a subset's, and on the validation view's train part (digits: 1,437 train images, 1,150 in the view).
TUNE_STREAMS = [
    ["--requests", "10"],
    ["--requests", "9"],
    ["--stream", "random", "--requests", "99", "--size", "0.01"],
    ["--stream", "random", "--size", "0.0004"],
    ["--stream", "random", "--size", "0.0008"],
    ["--stream", "random", "--size", "0.01", "--dataset_args", '{"train_size": 50}'],
    ["--stream", "interleaved", "--requests", "1"],
    ["--dataset", "fashionmnist", "--stream", "random", "--size", "0.00002"],
]


@pytest.mark.parametrize("argv", TUNE_STREAMS, ids=[" ".join(a) for a in TUNE_STREAMS])
def test_a_tune_study_s_stream_is_judged_early_as_the_full_check_judges_it(argv, tmp_path):
    from unlearnbench.cli import UsageError, _check_tune_early
    from unlearnbench.errors import ConfigError
    from unlearnbench.tune import tune_specs
    from unlearnbench.tune_options import tune_parser

    def full(argv: list[str]) -> None:  # what `tune_command` checks before anything is loaded
        for spec in tune_specs(tune_parser().parse_args(argv)):
            spec.validate()

    def refusal(check) -> str | None:
        try:
            check(["--method", "ga", *argv, "--out", str(tmp_path / "out")])
        except (ConfigError, UsageError) as error:
            return str(error)
        return None

    assert refusal(_check_tune_early) == refusal(full)


@pytest.mark.parametrize(("argv", "message"), TUNE_REFUSALS, ids=[" ".join(a) for a, _ in TUNE_REFUSALS])
def test_bad_tune_options_are_refused_before_torch_and_lightning_are_imported(argv, message, tmp_path):
    (tmp_path / "nope.yaml").write_text(yaml_dump({"methods": ["nope"]}))
    (tmp_path / "zero.yaml").write_text(
        yaml_dump({"methods": ["ga"], "streams": ["random"], "common": {"requests": 0}})
    )
    (tmp_path / "broken.yaml").write_text("methods: [ga\n")
    argv = ["tune", *(arg.replace("{tmp}", str(tmp_path)) for arg in argv), "--out", str(tmp_path / "out")]
    _skip_hardware_words_under_another_lightning(message)
    _assert_refused_before_torch(argv, message.replace("{tmp}", str(tmp_path)), tmp_path)


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_tune_prints_its_help_before_torch_is_imported_in_the_full_words(option, tmp_path, monkeypatch, capsys):
    """`tune --help` waited seconds for the imports of `tune.py` (Optuna, torch, Lightning) to print what its parser,
    which imports none of them, holds: `cmd_tune` prints it, the same text as `tune_command`."""
    from unlearnbench.tune import tune_command

    probe = (
        "import sys\nfrom unlearnbench.cli import main\n"
        f"try:\n    main(['tune', {option!r}])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "heavy = sorted(m for m in ('torch', 'lightning', 'optuna') if m in sys.modules)\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "100"}  # (the help is wrapped to the terminal's width)
    early = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert early.stderr == "0 []\n", early.stderr[-2000:]
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        tune_command([option])
    assert exit_info.value.code == 0
    assert early.stdout == capsys.readouterr().out and early.stdout.strip()


@pytest.mark.parametrize("path", sorted(ROOT.glob("benchmarks/tune_*.yaml")), ids=lambda path: path.name)
def test_the_early_checks_accept_every_shipped_tune_suite(path):
    from unlearnbench.grid import check_tune_file

    check_tune_file(path)


EARLY_ACCEPTED = [
    ["--method", "ga", "--download", "--data-dir", "{tmp}/to-be-created"],
    ["--method", "ga", "--data-dir", "{tmp}", "--size", "1", "--single-shot-every", "0", "--train-seed", "7"],
    ["--method", "ga", "--arch", "timm:resnet18", "--requests", "2"],
    ["--method", "ga", "--config", "{tmp}/zero.yaml", "--requests", "3"],  # the later one wins
    ["--method", "ga", "--size", "null", "--requests", "3", "--oracle", "none", "--download", "--requests", "2"],
    ["--method", "ga", "--recipe", '{"lr": 1e-3, "epochs": 2}'],  # the parser reads 1e-3 as a number, as YAML does not
    # the groups that need the classes are left to the full parse: the method's, the guards', the dataset's, the arch's
    ["--method", "salun", "--salun.ratio", "0.3", "--salun.optim.lr=0.1", "--guard", "ewc", "--ewc.ewc_lambda", "1"],
    ["--method", "ga", "--dataset.train_size", "100", "--dataset_args.test_size", "50", "--arch_args.width", "8"],
    ["--config", "{tmp}/salun.yaml", "--salun.ratio", "0.3"],  # the method named by a --config file
    ["--method", "salun", "--salun", '{"ratio": 0.3}', "--guard", "ewc", "--ewc", "{ewc_lambda: 1}"],  # a group whole
    ["--method", "ga", "--config", "{tmp}/salun.yaml", "--print_config"],
    # where the order of a group's spellings decides, the full parse does: the later value 0.3 wins
    ["--method", "salun", "--salun.ratio", "2", "--salun", '{"ratio": 0.3}'],
    ["--method", "salun", "--salun.ratio", "2", "--config", "{tmp}/salun.yaml"],
    ["--method", "salun", "--salun.optim.lr", "-1", "--salun.optim", "{lr: 0.1}"],
    ["--method", "ga", "--arch", "timm:resnet18", "--arch_args.anything", "1"],  # an open family: not known early
    ["--method", "ga", "--dataset_args.train_size", "null", "--arch_args.width", "8", "--guards", "ewc,lwf"],
    ["--method", "ga", "--requests", "9", "--stream", "classwise", "--size", "0.1", "--stream", "random"],
    ["--method", "ga", "--requests", "11", "--config", "{tmp}/zero.yaml", "--requests", "9"],
    ["--method", "ga", "--requests", "40", "--dataset", "cifar100", "--size", "2"],
    ["--method", "ga", "--requests", "20", "--dataset", "imagefolder"],  # no declared size: checked once loaded
    ["--config", "{tmp}/null.yaml"],  # a group given as null: its defaults
    ["--method", "ga", "--accelerator", "cpu", "--precision", "bf16-mixed", "--strategy", "ddp", "--precision", "16"],
    ["--config", "{tmp}/plugin.yaml"],  # a section the early parser lacks: the file is left to the full parse
    ["--method", "salun", "--salun", '{"ratio": 3}', "--config", "{tmp}/salun.yaml"],  # the later value 0.3 wins
]


@pytest.mark.parametrize("argv", EARLY_ACCEPTED, ids=[" ".join(a) for a in EARLY_ACCEPTED])
def test_the_early_checks_refuse_nothing_the_parser_would_take(argv, tmp_path):
    from unlearnbench.cli import _check_early

    (tmp_path / "zero.yaml").write_text("requests: 0\n")
    (tmp_path / "salun.yaml").write_text("method: salun\nsalun: {ratio: 0.3}\nguards: [ewc]\nrequests: 2\n")
    (tmp_path / "null.yaml").write_text("method: salun\nsalun: {optim: null}\ndataset_args: null\n")
    (tmp_path / "plugin.yaml").write_text("method: salun\nsalun: {ratio: 3}\nplugin_method: {x: 1}\n")
    _check_early([arg.replace("{tmp}", str(tmp_path)) for arg in argv])


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--method", "ga", "--request", "3"],
        ["run", "--method", "salun", "--salun.rat", "0.3"],
        ["tune", "--method", "ga", "--trial", "3"],
        ["suite", "s.yaml", "--chec", "true"],
        ["leaderboard", "runs", "--ou", "x"],
    ],
    ids=["run", "run-method-group", "tune", "suite", "leaderboard"],
)
def test_no_option_is_taken_for_the_one_it_abbreviates(argv, tmp_path, monkeypatch, capsys):
    """argparse's prefix matching read `--request 3` as `--requests 3`: an option is spelled out or refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("methods: [finetune]\n")
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unrecognized arguments: {argv[-2]}" in err.lower(), err


def test_a_data_dir_that_does_not_exist_is_refused_by_tune_and_by_a_suite_that_runs(tmp_path, monkeypatch, capsys):
    """The datasets' other places (the system's Fashion-MNIST) would be read in silence; `suite --check` may run where
    the data is not, and still resolves the grid."""
    monkeypatch.chdir(tmp_path)
    nowhere = str(tmp_path / "nowhere")
    suite = {"methods": ["finetune"], "common": {"data_dir": nowhere, "requests": 2, "recipe": FAST_RECIPE}}
    (tmp_path / "s.yaml").write_text(json.dumps(suite))
    for argv in (["tune", "--method", "finetune", "--data-dir", nowhere], ["suite", "s.yaml"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and f"--data-dir {nowhere} does not exist" in err
    assert main(["suite", "s.yaml", "--check"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(9)
)  # ten levels of ten aliases: 10^10 values once expanded


@pytest.mark.parametrize("command", ["run", "suite", "tune-suite"])
def test_a_yaml_alias_bomb_is_refused_in_one_line_without_expanding_it(command, tmp_path, capsys):
    (tmp_path / "bomb.yaml").write_text(f"method: finetune\nrequests: 2\nmethods: [finetune]\n{BOMB}")
    argv = {
        "run": ["run", "--config", str(tmp_path / "bomb.yaml")],
        "suite": ["suite", str(tmp_path / "bomb.yaml")],
        "tune-suite": ["tune", "--suite", str(tmp_path / "bomb.yaml")],
    }[command]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "alias bomb" in err and len(err) < 600, err[:2000]


def test_a_config_value_in_an_error_message_is_an_excerpt(tmp_path, capsys):
    (tmp_path / "big.yaml").write_text(yaml_dump({"run": list(range(20_000))}))
    with pytest.raises(SystemExit):
        main(["run", "--method", "finetune", "--config", str(tmp_path / "big.yaml")])
    err = capsys.readouterr().err
    assert "must be a mapping" in err and len(err) < 400, err[:1000]


def test_yaml_with_a_few_aliases_still_loads():
    from unlearnbench.io import load_yaml

    assert load_yaml("base: &b {lr: 0.1}\nsalun: *b\nrl: *b\n") == {
        "base": {"lr": 0.1},
        "salun": {"lr": 0.1},
        "rl": {"lr": 0.1},
    }
    assert load_yaml("") is None


def test_a_precision_is_one_run_however_it_is_spelt(tmp_path):
    """`precision: 16` in a YAML file is a number, as a suite's cell takes it (the run parser refused it as no string);
    it, `--precision 16` and `--precision 16-mixed` are one precision to Lightning, so one run directory."""
    from unlearnbench.cli import parse_run_args, run_config
    from unlearnbench.plan import resolve_run

    (tmp_path / "half.yaml").write_text("method: ga\nprecision: 16\n")
    spellings = [["--config", str(tmp_path / "half.yaml")], ["--precision", "16"], ["--precision", "16-mixed"]]
    run_dirs = {resolve_run(run_config(parse_run_args(["--method", "ga", *argv])))[1] for argv in spellings}
    assert len(run_dirs) == 1
    default = resolve_run(run_config(parse_run_args(["--method", "ga"])))[1]
    assert default not in run_dirs
