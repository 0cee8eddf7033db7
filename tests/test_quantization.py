"""Quantization robustness (evaluation/quantization.py): a model on the grid is left as it is, the rows' quantized
accuracies equal those of a hand-quantized state dict, the schedule, and bad widths refused before data is loaded."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import tiny_config
from tests.test_cli import _assert_refused_before_torch
from unlearnbench.evaluation.quantization import QUANTIZED_METRICS, quantize_weights, quantized_key
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import Runner
from unlearnbench.training import build_model


def _hand_quantized(state: dict[str, torch.Tensor], bits: int) -> dict[str, torch.Tensor]:
    """Symmetric round-to-nearest per output channel, written out: scale = max|w| / (2^(b−1) − 1) per row of every
    tensor of two or more dimensions, w -> round(w / scale) * scale."""
    high = 2 ** (bits - 1) - 1
    quantized = {}
    for name, tensor in state.items():
        if tensor.dim() < 2 or not tensor.is_floating_point():
            quantized[name] = tensor
            continue
        scale = tensor.abs().flatten(1).amax(1).clamp_min(1e-12) / high
        shape = (-1,) + (1,) * (tensor.dim() - 1)
        quantized[name] = torch.round(tensor / scale.view(shape)).clamp(-high, high) * scale.view(shape)
    return quantized


@pytest.mark.parametrize("bits", [8, 4])
def test_weights_already_on_the_grid_are_left_unchanged(digits, bits):
    """Every weight q · s with q a whole number in the narrow range, each channel reaching its end: rounding to the
    grid gives back the same floats."""
    high = 2 ** (bits - 1) - 1
    model = build_model("smallcnn", digits)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() < 2:
                continue
            q = torch.randint(-high, high + 1, parameter.shape, generator=generator).float()
            q.view(len(q), -1)[:, 0] = high  # each channel's largest magnitude is the grid's end
            # powers of two, so that max|w| / q_max and w / scale are exact in float32 as they are on paper
            scale = 2.0 ** -torch.randint(3, 9, (len(q),), generator=generator).float()
            parameter.copy_(q * scale.view((-1,) + (1,) * (parameter.dim() - 1)))
    quantized = quantize_weights(model, bits)
    for (name, before), after in zip(model.state_dict().items(), quantized.state_dict().values(), strict=True):
        assert torch.equal(before, after), name
    assert quantized is not model


def test_a_model_off_the_grid_is_moved_onto_it(digits):
    model = build_model("smallcnn", digits)
    quantized = quantize_weights(model, 4)
    weight = next(p for p in quantized.parameters() if p.dim() >= 2).detach()
    levels = [torch.unique(row).numel() for row in weight.flatten(1)]
    assert max(levels) <= 15 and not torch.equal(weight, next(p for p in model.parameters() if p.dim() >= 2))


def test_the_rows_quantized_accuracies_are_a_hand_quantized_state_dicts(tmp_path, shared_store):
    """T = 2, quantized at t = 2 only (`--quantize-every 2`): for the method (its saved state), the oracle and the
    original model, each key equals the accuracy of the model loaded from a hand-quantized state dict, computed here
    by argmax on the request's sets."""
    config = tiny_config(tmp_path, shared_store, "finetune", requests=2, quantize_every=2, single_shot_every=0)
    result = Runner.from_config(config).run()
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert not any(key.startswith("int") for side in ("method", "oracle", "original") for key in rows[0][side])

    runner = Runner.from_config(config)
    request = runner.stream.select(2)
    method_state = RunDirectory(result.run_dir).load_state(2)
    models = {
        "method": {name.removeprefix("model."): v for name, v in method_state.items() if name.startswith("model.")},
        "oracle": runner.oracle(request, 0).state_dict(),
        "original": runner.pretrained_model().state_dict(),
    }
    dataset = runner.dataset
    sets = {
        "forget_acc": (dataset.train, request.forget),
        "retain_acc": (dataset.train, request.retain),
        "test_acc": (dataset.test, request.test_retain),
    }
    for side, state in models.items():
        for bits in (8, 4):
            model = build_model(config.arch.name, dataset)
            model.load_state_dict(_hand_quantized(state, bits))
            model.eval()
            for key, (split, indices) in sets.items():
                index = torch.as_tensor(np.asarray(indices))
                with torch.no_grad():
                    predictions = model(dataset.normalize(split.images[index])).argmax(1)
                expected = 100.0 * float((predictions == split.labels[index]).float().mean())
                assert rows[1][side][quantized_key(bits, key)] == pytest.approx(expected, abs=1e-4), (side, bits, key)
    assert set(QUANTIZED_METRICS) == set(sets)
    moved = [rows[1][side][quantized_key(4, key)] != rows[1][side][key] for side in models for key in sets]
    assert any(moved)  # 4 bits moves some accuracy: the keys are the quantized model's, not the model's own


REFUSALS = [
    (["--quantize-bits", "[3]"], "quantize_bits must be a list of bit widths among 8, 4, got [3]"),
    (["--quantize_bits", "[8, 8]"], "quantize_bits names a width twice"),
    (["--quantize-every=-1"], "quantize_every must be a whole number >= 0"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_bad_quantization_options_are_refused_in_one_line_before_data_is_loaded(argv, message, tmp_path):
    _assert_refused_before_torch(
        ["run", "--method", "finetune", *argv, "--out", str(tmp_path / "out")], message, tmp_path
    )
