"""Every registered arch and a `timm:` model: builds, trains one step, head(features(x)) == forward(x).

Inputs are 32x32 RGB (CIFAR's shape) with batch 2, so the deep archs stay fast on a CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.methods.subspace import ProjectedModel
from unlearnbench.models.blocks import last_blocks, parameter_blocks
from unlearnbench.models.preresnet import PreActBottleneck
from unlearnbench.recipe import Recipe
from unlearnbench.registry import ARCHS, DATASETS, UnknownNameError
from unlearnbench.training import build_model

TIMM_EXAMPLE = "timm:resnet10t"
NUM_CLASSES = 5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Deep nets of many small ops are far faster single-threaded on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("arch", [*ARCHS.names(), TIMM_EXAMPLE])
def test_arch_trains_and_head_of_features_is_forward(arch):
    torch.manual_seed(0)
    model = ARCHS.get(arch)(num_classes=NUM_CLASSES, in_channels=3, input_size=32)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))

    model.eval()
    with torch.no_grad():
        features = model.forward_features(x)
        pooled = model.forward_head(features, pre_logits=True)
        logits = model.forward_head(features)
        torch.testing.assert_close(logits, model(x))
    classifier = model.get_classifier()
    assert logits.shape == (2, NUM_CLASSES)
    assert pooled.shape == (2, classifier.in_features) and classifier.out_features == NUM_CLASSES
    torch.testing.assert_close(classifier(pooled), logits)  # LOFT's path: logits = head(z)


@pytest.mark.parametrize(("arch", "width"), [("vgg16_bn", 512), ("resnet18", 512), ("preresnet110", 256)])
def test_cifar_archs_take_64x64_and_8x8_grey_inputs(arch, width):
    for channels, size in ((3, 64), (1, 8)):
        model = ARCHS.get(arch)(num_classes=NUM_CLASSES, in_channels=channels, input_size=size).eval()
        with torch.no_grad():
            pooled = model.forward_head(model.forward_features(torch.randn(1, channels, size, size)), pre_logits=True)
        assert pooled.shape == (1, width)


#: Every registered arch at its defaults, smallcnn as the Fashion-MNIST recipes run it (two pools), a timm model.
NATIVE_28X28 = [
    *(pytest.param(arch, {}, id=arch) for arch in ARCHS.names()),
    pytest.param("smallcnn", {"pools": 2}, id="smallcnn-pools2"),
    pytest.param(TIMM_EXAMPLE, {}, id=TIMM_EXAMPLE),
]


@pytest.mark.parametrize(("arch", "arch_args"), NATIVE_28X28)
def test_every_arch_keeps_the_method_contracts_on_28x28_grey_inputs(arch, arch_args):
    """Fashion-MNIST and MNIST are 1x28x28, used as they are (no upsampling): on them every arch gives what methods use.

    The penultimate features are `num_features` wide and the classifier maps them to the logits
    (LOFT's split: its projected model at the identity is the model itself, fused or not); the
    layer groups partition the parameters from the stem to the classifier, which is alone last,
    so `last_blocks(k)` (CF-k, EU-k) is the last k groups.
    """
    torch.manual_seed(0)
    model = ARCHS.get(arch)(num_classes=NUM_CLASSES, in_channels=1, input_size=28, **arch_args).eval()
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        features = model.forward_features(x)
        pooled, logits = model.forward_head(features, pre_logits=True), model.forward_head(features)
        projected = [ProjectedModel(copy.deepcopy(model), fuse)(x) for fuse in (False, True)]
    classifier = model.get_classifier()
    assert logits.shape == (2, NUM_CLASSES) and torch.isfinite(logits).all()
    assert pooled.shape == (2, model.num_features) and classifier.in_features == model.num_features
    torch.testing.assert_close(classifier(pooled), logits)
    for output in projected:
        torch.testing.assert_close(output, logits)

    blocks = parameter_blocks(model)
    order = {name: i for i, (name, _) in enumerate(model.named_parameters())}
    assert sorted(name for block in blocks for name in block) == sorted(order)  # each parameter exactly once
    firsts = [min(order[name] for name in block) for block in blocks]
    assert firsts == sorted(firsts) and firsts[0] == 0 and len(blocks) >= 3  # stem first, in the model's order
    path = next(name for name, module in model.named_modules() if module is classifier)
    assert set(blocks[-1]) == {f"{path}.{name}" for name, _ in classifier.named_parameters()}
    assert last_blocks(model, 2) == set(blocks[-2]) | set(blocks[-1])


def test_mlp_is_784_512_256_10_on_fashion_mnist_and_its_blocks_are_its_hidden_layers():
    from unlearnbench.training import arch_parameters

    assert arch_parameters("mlp") == {"width": 512, "depth": 2}
    model = ARCHS.get("mlp")(num_classes=10, in_channels=1, input_size=28)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 512), (512, 256), (256, 10)]
    assert model.num_features == 256 and model.get_classifier() is linears[-1]
    assert parameter_blocks(model) == [
        ["blocks.0.0.weight", "blocks.0.0.bias"],
        ["blocks.1.0.weight", "blocks.1.0.bias"],
        ["head.weight", "head.bias"],
    ]
    x = torch.randn(3, 1, 28, 28)  # the penultimate features are the last hidden layer's ReLU outputs
    hidden = torch.relu(linears[1](torch.relu(linears[0](x.flatten(1)))))
    torch.testing.assert_close(model.forward_head(model.forward_features(x), pre_logits=True), hidden)
    deeper = ARCHS.get("mlp")(num_classes=3, in_channels=3, input_size=8, width=6, depth=4)
    widths = [(m.in_features, m.out_features) for m in deeper.modules() if isinstance(m, nn.Linear)]
    assert widths == [(192, 6), (6, 3), (3, 1), (1, 1), (1, 3)]  # halving, never below one unit
    assert len(parameter_blocks(deeper)) == 5


def test_smallcnn_width_is_an_arch_argument(tmp_path):
    from unlearnbench.training import arch_parameters

    assert arch_parameters("smallcnn") == {"width": 32, "pools": 1} and arch_parameters("resnet18") == {}
    narrow = build_model("smallcnn", DATASETS.get("digits")(), {"width": 8})
    assert narrow.get_classifier().in_features == 4 * 8
    pooled = ARCHS.get("smallcnn")(num_classes=10, in_channels=1, input_size=28, pools=2)
    assert pooled.forward_features(torch.randn(1, 1, 28, 28)).shape == (1, 128, 7, 7)  # two pools: 28 -> 7
    assert ARCHS.get("smallcnn")(num_classes=10).forward_features(torch.randn(1, 1, 28, 28)).shape[-1] == 14
    with pytest.raises(ConfigError, match="arch 'resnet18' has no argument"):
        RunConfig.from_options(method="finetune", arch="resnet18", arch_args={"width": 8}, out=tmp_path).validate()


def test_preresnet110_has_110_layers_of_bottlenecks():
    model = ARCHS.get("preresnet110")(num_classes=100)
    blocks = [m for m in model.modules() if isinstance(m, PreActBottleneck)]
    assert len(blocks) == 36 and all(len(stage) == 12 for stage in (model.layer1, model.layer2, model.layer3))
    # stem + 3 convs per block + classifier; projection shortcuts are not counted in the depth
    assert 1 + 3 * len(blocks) + 1 == 110


def test_no_arch_downloads_weights(monkeypatch):
    import timm

    created = []
    original = timm.create_model
    monkeypatch.setattr(timm, "create_model", lambda *a, **k: created.append(k) or original(*a, **k))
    for arch in ("resnet18", TIMM_EXAMPLE):
        ARCHS.get(arch)(num_classes=2, in_channels=3, input_size=32)
    assert created and all(k["pretrained"] is False for k in created)


def test_timm_names_resolve_through_the_registry_and_the_config(tmp_path):
    assert TIMM_EXAMPLE in ARCHS and "timm:no_such_model" not in ARCHS
    assert TIMM_EXAMPLE not in ARCHS.names()  # names() lists plain entries only
    with pytest.raises(UnknownNameError, match="unknown timm model 'no_such_model'"):
        ARCHS.get("timm:no_such_model")
    with pytest.raises(UnknownNameError, match=r"timm:<name>"):
        ARCHS.get("resnet1000")
    RunConfig.from_options(method="finetune", arch=TIMM_EXAMPLE, out=tmp_path).validate()
    with pytest.raises(ConfigError, match="unknown timm model"):
        RunConfig.from_options(method="finetune", arch="timm:no_such_model", out=tmp_path).validate()
    model = build_model("timm:vit_tiny_patch16_224", DATASETS.get("synthetic_cifar_mini")())
    assert model.patch_embed.img_size == (32, 32)  # takes the dataset's image size


def test_every_recipe_file_names_a_registered_dataset_and_arch():
    from unlearnbench.recipe import RECIPE_DIR

    files = sorted(RECIPE_DIR.glob("*.yaml"))
    assert len(files) >= 13
    for path in files:
        dataset, arch = path.stem.split("-", 1)
        assert dataset in DATASETS and arch in ARCHS, path.name
        recipe = Recipe.for_setting(dataset, arch)
        assert recipe.momentum == 0.9 and recipe.epochs > 0 and recipe.lr > 0


def test_the_memorizing_tier_has_its_measured_recipe():
    """fashionmnist-mlp: measured (its header) to fit >= 99% of 10,000 training images unaugmented, >= 85% test."""
    assert Recipe.for_setting("fashionmnist", "mlp") == Recipe(
        epochs=30, lr=0.05, batch_size=64, momentum=0.9, weight_decay=5e-4
    )
    header = Recipe.path_for("fashionmnist", "mlp").read_text().split("\nepochs:")[0]
    assert "{train_size: 10000, test_size: 2000, augment: false}" in header and "benchmarks/pretraining.py" in header
    assert all(f"(seed {seed})" in header for seed in (0, 1, 2))


@pytest.mark.parametrize("document", ["docs/guide.md", "docs/scale.md"])
def test_the_documented_memorizing_tier_command_resolves_to_the_measured_setting(document, tmp_path, monkeypatch):
    """The command the user guide and docs/scale.md give resolves (nothing loaded) to the setting the recipe measured."""
    import re
    import shlex
    from pathlib import Path

    from unlearnbench.cli import parse_run_args, run_config
    from unlearnbench.plan import plan_run

    text = (Path(__file__).resolve().parent.parent / document).read_text()
    command = re.search(r"<!-- example: memorizing-tier -->\n```bash\n(.*?)```", text, re.S).group(1)
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["unlearnbench", "run"]
    monkeypatch.chdir(tmp_path)
    plan = plan_run(run_config(parse_run_args(argv[2:])))
    assert plan.identity.dataset_args == {"train_size": 10000, "test_size": 2000, "augment": False}
    assert (plan.identity.arch, plan.identity.arch_args) == ("mlp", None)
    assert plan.recipe == Recipe.for_setting("fashionmnist", "mlp")


def test_pretraining_benchmark_reports_the_runs_pretrained_model():
    """benchmarks/pretraining.py, which measures the recipes: accuracies of the model a run pretrains, its CPU cost."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "pretraining.py"
    spec = importlib.util.spec_from_file_location("pretraining_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    (row,) = benchmark.main(["--dataset", "digits", "--arch", "mlp", "--recipe", '{"epochs": 10}', "--seeds", "1"])
    assert row["seed"] == 1 and row["recipe"] == {**Recipe.for_setting("digits", "mlp").as_dict(), "epochs": 10}
    assert 90 < row["test_acc"] <= 100 and 90 < row["train_acc"] <= 100 and row["cpu_s"] > 0


@pytest.mark.slow
def test_a_regular_install_ships_every_recipe(tmp_path):
    """The recipes are package data: a wheel (what `pip install unlearnbench` installs) holds them all."""
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    from unlearnbench.recipe import RECIPE_DIR

    root, source = Path(__file__).resolve().parent.parent, tmp_path / "source"
    source.mkdir()  # a copy, so that the build leaves no build/ or egg-info in the checkout
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    shutil.copytree(root / "unlearnbench", source / "unlearnbench", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("unlearnbench-*.whl")
    shipped = {
        Path(name).name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("unlearnbench/recipes/")
    }
    assert shipped == {path.name for path in RECIPE_DIR.glob("*.yaml")} and len(shipped) >= 13
