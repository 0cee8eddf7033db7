"""The method base split: `GradientMethod`'s SGD settings are one typed group (`optim`), spelled nested everywhere
(`--salun.optim.lr`, YAML `salun: {optim: {lr: ...}}`, tuned files, search spaces and valid ranges by path `optim.lr`,
the run identity), and the run directories recorded with the flat spelling before the split keep their names."""

from __future__ import annotations

import inspect
from dataclasses import asdict, fields

import pytest
import yaml

from tests.conftest import SimulatedCrashError, crash_before_request, tiny_config
from unlearnbench.cli import main, parse_run_args, run_config
from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.io import load_yaml
from unlearnbench.methods.base import AdamOptimizer, GradientMethod, SGDSettings, UnlearningMethod, method_arguments
from unlearnbench.plan import check_suite, resolve_run
from unlearnbench.registry import METHODS
from unlearnbench.rundir import RunDirectory, identity_hash
from unlearnbench.runner import Runner

SETTINGS = [field.name for field in fields(SGDSettings)]

#: (method, arguments as now spelled, run directory recorded with the flat spelling before the split). RL's default
#: order has since become the paper's (`mixed`), so its runs of then are those of `forget_then_retain`; SalUn's
#: identity has since gained `hold`, so no SalUn run of then keeps its name.
FORMER_RL = {"batches": "forget_then_retain"}
RECORDED = [
    ("rl", FORMER_RL, "rl-classwise-digits-smallcnn-T5-seed0-da38de97"),
    ("rl", {**FORMER_RL, "optim": {"lr": 0.05, "epochs": 3}}, "rl-classwise-digits-smallcnn-T5-seed0-b585f1ad"),
    ("loft", {}, "loft-classwise-digits-smallcnn-T5-seed0-543ea123"),
    ("loft", {"lr": 0.5}, "loft-classwise-digits-smallcnn-T5-seed0-a88b702d"),  # LOFT's own lr: no SGD group
    ("ssd", {}, "ssd-classwise-digits-smallcnn-T5-seed0-fd08c8db"),
    ("scrub", {}, "scrub-classwise-digits-smallcnn-T5-seed0-c25c333c"),
    ("scrub", {"optim": {"lr": 0.001}}, "scrub-classwise-digits-smallcnn-T5-seed0-69134dc0"),
    ("fisher", {}, "fisher-classwise-digits-smallcnn-T5-seed0-effeff01"),
    ("rum", {}, "rum-classwise-digits-smallcnn-T5-seed0-824e4379"),
    ("continual_loft", {}, "continual_loft-classwise-digits-smallcnn-T5-seed0-666c07dd"),
    ("cf_k", {"optim": {"batch_size": 32}}, "cf_k-classwise-digits-smallcnn-T5-seed0-be39af3e"),
]


@pytest.mark.parametrize(("method", "args", "recorded"), RECORDED, ids=[f"{m}{a or ''}" for m, a, _ in RECORDED])
def test_run_directories_recorded_before_the_split_are_still_found(method, args, recorded, tmp_path):
    identity, run_dir = resolve_run(RunConfig.from_options(method=method, method_args=args, out=tmp_path))
    assert run_dir.name == recorded
    gradient = issubclass(METHODS.get(method), GradientMethod)
    assert ("optim" in identity.method_args) == gradient  # the group nested, as identities now hold it


def test_the_identity_records_the_settings_nested_with_the_methods_own_defaults(tmp_path):
    identity, _ = resolve_run(RunConfig.from_options(method="salun", method_args={"optim": {"lr": 0.1}}, out=tmp_path))
    assert identity.method_args == {
        "optim": {"lr": 0.1, "epochs": 10, "batch_size": 256, "momentum": 0.9, "weight_decay": 0.0005},
        "batches": "mixed", "exclude_true": False, "ratio": 0.5, "hold": "gradient",
    }  # fmt: skip


def _no_data(monkeypatch):
    def load(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the input was checked")

    monkeypatch.setattr("unlearnbench.data.cache.DatasetCache.load", load)


@pytest.mark.parametrize("spelling", [["--salun.lr", "0.1"], ["--salun.lr=0.1"]])
def test_the_old_command_line_spelling_is_one_line_naming_the_new_one(spelling, tmp_path, monkeypatch, capsys):
    _no_data(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "salun", *spelling, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "--salun.optim.lr" in err, err
    assert not (tmp_path / "o").exists()


def test_the_old_yaml_spelling_is_one_line_naming_the_new_one(tmp_path, monkeypatch, capsys):
    _no_data(monkeypatch)
    config = tmp_path / "run.yaml"
    config.write_text("method: rl\nrl:\n  epochs: 2\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--config", str(config), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "--rl.optim.epochs" in err and "{optim: {epochs: ...}}" in err, err


def test_the_old_suite_spelling_names_the_new_one(tmp_path):
    suite = {"common": {"requests": 2}, "methods": [{"salun": {"lr": 0.1}}], "out": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"--salun\.optim\.lr"):
        check_suite(suite)


def test_an_out_of_range_setting_is_refused_in_the_group(tmp_path, monkeypatch, capsys):
    _no_data(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "salun", "--salun.optim.lr", "-1", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err
        == "unlearnbench: error: method 'salun' argument optim.lr must satisfy optim.lr > 0, got -1.0\n"
    )


def test_an_unknown_setting_in_the_group_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"optim of method 'salun' has no setting\(s\) lrr; its settings are: lr"):
        RunConfig.from_options(method="salun", method_args={"optim": {"lrr": 0.1}}, out=tmp_path).validate()


ADAM_METHODS = [name for name in METHODS.names() if issubclass(METHODS.get(name), AdamOptimizer)]


def test_every_adam_method_is_found():
    assert {"bad_teacher", "scar", "unsir"} <= set(ADAM_METHODS)


@pytest.mark.parametrize("method", ADAM_METHODS)
def test_a_setting_adam_does_not_read_is_refused_unless_at_its_default(method, tmp_path, monkeypatch, capsys):
    """`momentum` would name the run after a value Adam never reads; at its default (a replayed record spells every
    setting out) it is accepted."""
    _no_data(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", method, f"--{method}.optim.momentum", "0.5", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and not (tmp_path / "o").exists()
    assert capsys.readouterr().err == (
        f"unlearnbench: error: method {method!r} trains with Adam, which does not read optim.momentum; leave it out\n"
    )
    default = asdict(inspect.signature(METHODS.get(method)).parameters["optim"].default)["momentum"]
    RunConfig.from_options(method=method, method_args={"optim": {"momentum": default}}, out=tmp_path).validate()


def _built(config: RunConfig):
    return METHODS.get(config.method.name)(**config.method_kwargs())


def test_the_nested_spelling_reaches_the_method_over_its_own_defaults(tmp_path):
    cli = run_config(parse_run_args(["--method", "salun", "--salun.optim.lr", "0.1", "--out", str(tmp_path)]))
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("method: salun\nsalun:\n  optim: {lr: 0.1}\n")
    from_yaml = run_config(parse_run_args(["--config", str(yaml_file), "--out", str(tmp_path)]))
    (cell,) = check_suite({"methods": [{"salun": {"optim": {"lr": 0.1}}}], "out": str(tmp_path)})
    expected = SGDSettings(lr=0.1, epochs=10, batch_size=256, momentum=0.9, weight_decay=5e-4)  # SalUn's others
    for config in (cli, from_yaml, cell.config):
        method = _built(config)
        assert method.optim == expected and method.hparams["optim"]["lr"] == 0.1 and method.batch_size == 256
    assert resolve_run(cli)[1] == resolve_run(from_yaml)[1] == cell.run_dir


def test_a_nested_group_becomes_the_settings_over_the_methods_own_default():
    salun = METHODS.get("salun")
    arguments = method_arguments(salun, {"optim": {"lr": 0.1}, "ratio": 0.3})
    assert arguments == {"ratio": 0.3, "optim": SGDSettings(lr=0.1, epochs=10)}  # over SalUn's lr 0.013 default
    loft = METHODS.get("loft")
    assert method_arguments(loft, {"lr": 0.5}) == {"lr": 0.5}  # LOFT's lr is its own, not an SGD setting


@pytest.mark.parametrize("method", METHODS.names())
def test_only_a_gradient_method_takes_sgd_settings_and_every_method_has_a_batch_size(method):
    cls = METHODS.get(method)
    parameters = inspect.signature(cls).parameters
    built = cls()
    assert isinstance(built.batch_size, int) and built.batch_size >= 1
    if issubclass(cls, GradientMethod):
        assert "optim" in parameters and not set(SETTINGS) & set(parameters), "settings repeated beside the group"
        assert built.optim == parameters["optim"].default
        assert built.hparams["optim"] == asdict(built.optim) and not set(SETTINGS) & set(built.hparams)
    else:
        assert "optim" not in parameters and not hasattr(built, "optim") and "optim" not in built.hparams
        assert not {"epochs", "momentum", "weight_decay"} & set(built.hparams), "a setting it would ignore"


def test_a_method_without_sgd_settings_has_no_optim_group(tmp_path):
    with pytest.raises(ConfigError, match="method 'ssd' has no argument"):
        RunConfig.from_options(method="ssd", method_args={"optim": {"epochs": 1}}, out=tmp_path).validate()


def test_a_plugin_subclassing_the_base_without_unlearn_names_the_fix():
    class Bare(UnlearningMethod):
        pass

    with pytest.raises(NotImplementedError, match="subclass GradientMethod"):
        Bare().unlearn(lambda epochs: None)


def test_rum_stage_arguments_use_the_nested_spelling():
    rum = METHODS.get("rum")(stage_args={"salun": {"optim": {"lr": 0.1}}})
    assert rum.stages[2].optim.lr == 0.1 and rum.stages[2].optim.epochs == 10
    with pytest.raises(ConfigError, match=r"--salun\.optim\.lr"):
        METHODS.get("rum")(stage_args={"salun": {"lr": 0.1}})


def test_groups_of_two_layers_merge_over_the_methods_own_default():
    """A tuned file's `optim` under a command line's (`tiny_config`'s short schedule under a test's): neither
    replaces the other, a field given by both is the later layer's, and one given by neither the method's default."""
    salun = METHODS.get("salun")
    group = method_arguments(salun, {"optim": {"epochs": 2, "lr": 0.5}}, {"optim": {"momentum": 0.5, "lr": 0.1}})[
        "optim"
    ]
    assert (group.epochs, group.momentum, group.lr, group.weight_decay) == (2, 0.5, 0.1, 5e-4)


def test_a_run_folder_recorded_flat_resumes_with_the_same_command(tmp_path, shared_store, monkeypatch):
    """A run interrupted before the settings were a group holds them flat in its config.yaml (`lr:` beside
    `batches:`); the same command finds its folder, reads its identity nested and serves the remaining request."""
    config = tiny_config(tmp_path, shared_store, "finetune", requests=2)
    with monkeypatch.context() as patch:
        crash_before_request(patch, 2)
        with pytest.raises(SimulatedCrashError):
            Runner.from_config(config).run()
    folder = Runner.from_config(config).run_dir.path
    recorded = load_yaml((folder / "config.yaml").read_text())
    settings = recorded["method_args"].pop("optim")
    recorded["method_args"] |= settings  # the flat spelling of then
    (folder / "config.yaml").write_text(yaml.safe_dump(recorded))

    partial = Runner.from_config(config)
    assert partial.run_dir.path == folder and len(partial.run_dir.rows()) == 1
    assert partial.run_dir.identity() == partial.identity  # read nested, as the command's identity is
    assert identity_hash(partial.run_dir.identity()) == folder.name.rsplit("-", 1)[1]
    resumed = partial.run()
    assert not resumed.already_complete and len(RunDirectory(folder).rows()) == 2
