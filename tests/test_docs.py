"""Every code block of the README and of docs/*.md runs in a test, by what its fence says it is.

The convention (a fence states its language; one without is refused):
- `python`: executed, each block on its own in a fresh namespace, in a folder whose `runs/` holds the
  run directories the blocks read (finetune chains of seed 0 made with `--save-logits true`). Every
  method, guard, stream kind, logger or metric a block registers is then used by a 2-request run,
  so an example whose hooks do not fit what the runner calls fails here, not for a reader.
- `bash`: shell commands, not executed (they train, download or need a database). Each
  `unlearnbench run` among them is resolved, parsed and planned with nothing loaded or written,
  except those that read a file an earlier command writes (`--config`, `--hparams`) or print help.
- `yaml`: parsed; a suite (a `methods` key) is resolved as `unlearnbench suite --check` does and a
  tune suite (a `trials` key) as `unlearnbench tune --suite` does, unless it reads tuned files.
- `toml`: parsed.
- `text`: a diagram or an output, not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST_RECIPE, run_tiny, tiny_config
from unlearnbench.cli import parse_run_args, run_config
from unlearnbench.evaluation.keys import METRIC_KEYS
from unlearnbench.plan import check_suite, plan_run
from unlearnbench.registry import GUARDS, LOGGERS, METHODS, STREAMS
from unlearnbench.runner import Runner
from unlearnbench.tune import suite_specs

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash", "yaml", "toml", "text")
FENCE = re.compile(r"^```(\S*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def _blocks() -> list[Block]:
    blocks = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            blocks.append(Block(str(path.relative_to(ROOT)), line, match.group(1), match.group(2)))
    return blocks


BLOCKS = _blocks()


def _of(language: str) -> list[Block]:
    return [block for block in BLOCKS if block.language == language]


def test_every_fence_names_one_of_the_languages_the_tests_know():
    unknown = [f"{block} ({block.language or 'no language'})" for block in BLOCKS if block.language not in LANGUAGES]
    assert not unknown, f"give these fences one of {LANGUAGES}: {unknown}"
    assert len(_of("python")) >= 9 and len(_of("bash")) >= 10


@pytest.fixture(scope="module")
def documented_runs(tmp_path_factory, shared_store) -> Path:
    """A folder whose runs/ holds two unlearning chains of seed 0 with two oracles each, saved logits and the robustness
    evaluations at T."""
    folder = tmp_path_factory.mktemp("documented")
    for unlearn_seed in (0, 1):
        config = tiny_config(
            folder / "runs",
            shared_store,
            "finetune",
            requests=5,
            oracle_every=5,
            oracle_seeds=2,
            single_shot_every=0,
            relearn_every=5,  # the relearning attack and the quantized accuracies at t = 5 (docs/reporting.md)
            relearn_steps=20,
            quantize_every=5,
            unlearn_seed=unlearn_seed,
            save_logits=True,
            method_args={"optim": {"epochs": 1}},
        )
        assert config.arch.recipe == FAST_RECIPE
        Runner.from_config(config).run()
    return folder


@pytest.fixture
def registries(monkeypatch):
    """Registrations a block makes stay in its test."""
    for registry in (METHODS, GUARDS, STREAMS, LOGGERS):
        registry.names()  # the built-ins loaded first: restoring an unloaded registry would leave it empty
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    saved = dict(METRIC_KEYS)
    yield
    METRIC_KEYS.clear()
    METRIC_KEYS.update(saved)


def _exercise_registrations(before: dict, tmp_path: Path, store: Path) -> list[str]:
    """A 2-request run for each entry a block registered; returns what was run."""
    ran = []
    for name in sorted(set(METHODS._entries) - before["methods"]):
        assert len(run_tiny(tmp_path / name, store, name).rows) == 2
        ran.append(f"method {name}")
    for name in sorted(set(GUARDS._entries) - before["guards"]):
        assert len(run_tiny(tmp_path / name, store, "finetune", guards=[name]).rows) == 2
        ran.append(f"guard {name}")
    for name in sorted(set(STREAMS._entries) - before["streams"]):
        assert len(run_tiny(tmp_path / name, store, "finetune", stream=name).rows) == 2
        ran.append(f"stream {name}")
    for name in sorted(set(LOGGERS._entries) - before["loggers"]):
        assert len(run_tiny(tmp_path / name, store, "finetune", logger=name).rows) == 2
        ran.append(f"logger {name}")
    for key in sorted(set(METRIC_KEYS) - before["metrics"]):
        rows = run_tiny(tmp_path / key, store, "finetune").rows
        assert all(row.method[key] is not None for row in rows)
        ran.append(f"metric {key}")
    return ran


@pytest.mark.parametrize("block", _of("python"), ids=str)
def test_python_block_runs(block, documented_runs, shared_store, registries, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(documented_runs)
    before = {
        "methods": set(METHODS._entries),
        "guards": set(GUARDS._entries),
        "streams": set(STREAMS._entries),
        "loggers": set(LOGGERS._entries),
        "metrics": set(METRIC_KEYS),
    }
    exec(compile(block.code, str(block), "exec"), {"__name__": f"docs_block_{block.line}"})
    _exercise_registrations(before, tmp_path, shared_store)


def _run_commands(block: Block) -> list[list[str]]:
    """The `unlearnbench run` commands of a shell block, as argument lists (continued lines joined, `&&` split)."""
    commands = []
    for line in block.code.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            argv = shlex.split(part, comments=True)
            if argv[:2] == ["unlearnbench", "run"]:
                commands.append(argv[2:])
    return commands


RUN_COMMANDS = [(block, argv) for block in _of("bash") for argv in _run_commands(block)]
READS_FILES = ("--config", "--hparams", "--help")


@pytest.mark.parametrize(("block", "argv"), RUN_COMMANDS, ids=[f"{b}:{' '.join(a)}" for b, a in RUN_COMMANDS])
def test_documented_run_command_resolves(block, argv, no_datasets, empty_cwd):
    if any(arg in READS_FILES for arg in argv):
        pytest.skip("reads a file an earlier command writes")
    plan = plan_run(run_config(parse_run_args(argv)))
    assert plan.identity.method == argv[argv.index("--method") + 1]
    assert not any(empty_cwd.iterdir())


@pytest.mark.parametrize("block", _of("yaml"), ids=str)
def test_yaml_block_parses_and_a_suite_resolves(block, no_datasets, empty_cwd):
    document = yaml.safe_load(block.code)
    assert isinstance(document, dict) and document
    if "hparams" in block.code:
        return  # its cells read tuned files that an earlier `unlearnbench tune` writes
    if "trials" in document:
        assert suite_specs(document)
    elif "methods" in document:
        assert check_suite(document)


@pytest.mark.parametrize("block", _of("toml"), ids=str)
def test_toml_block_parses(block):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    assert tomllib.loads(block.code)
