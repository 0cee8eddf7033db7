"""Quantization robustness: forget, retain and test accuracy of a model whose weights are rounded to 8 or 4 bits.

Zhang et al. (2024/ICLR 2025, "Catastrophic Failure of LLM Unlearning via Quantization") found that unlearning
which moves weights only a little is undone by rounding them: the unlearned model and the original round to the
same grid point, so the quantized unlearned model answers as the original did. Our measure is theirs on an image
classifier: weight-only, round-to-nearest (RTN), per output channel, symmetric, at each bit width of
`--quantize-bits`, of the method's model after request t and, beside it, of the oracle and the original model.

The quantizer is torch's own: `PerChannelMinMaxObserver` gives each output channel (dimension 0 of every
parameter with two or more dimensions: linear and convolution weights, LOFT's projection) the scale
max|w| / q_max, and `torch.fake_quantize_per_channel_affine` rounds to that grid and back to float. The range is
the narrow symmetric one, [-(2^(b-1) − 1), 2^(b-1) − 1] ([-127, 127] at 8 bits, [-7, 7] at 4), which maps each
channel's largest weight to the grid's end exactly: a model already on the grid is left unchanged (the full range
[-128, 127] would shrink it by 127/127.5 at every pass). Biases, batch-norm parameters and buffers stay float, as
in weight-only quantization. Departure from Zhang et al.: they quantize LLMs with AWQ and GPTQ as well as RTN;
RTN is the one that needs no calibration data, and the one a deployment of a small classifier would use.

Cost: a copy of the model and one evaluation pass over the train and test splits per bit width and model (three
models: the method's, the oracle's, the original's); on the memorizing Fashion-MNIST tier's MLP about 0.2
CPU-seconds each (docs/reporting.md, "Does forgotten knowledge stay forgotten?").
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.ao.quantization.observer import PerChannelMinMaxObserver

from unlearnbench.early_checks import QUANTIZATION_BITS


def quantization_range(bits: int) -> tuple[int, int]:
    """The narrow symmetric integer range of `bits`: (−(2^(b−1) − 1), 2^(b−1) − 1)."""
    if bits not in QUANTIZATION_BITS:
        raise ValueError(f"unknown bits {bits!r}; choose one of: {', '.join(map(str, QUANTIZATION_BITS))}")
    high = 2 ** (bits - 1) - 1
    return -high, high


@torch.no_grad()
def quantize_weights(model: nn.Module, bits: int) -> nn.Module:
    """A copy of `model` whose weights (parameters of two or more dimensions) are rounded per output channel to the
    symmetric `bits`-bit grid and back to float; everything else is the model's."""
    low, high = quantization_range(bits)
    quantized = copy.deepcopy(model)
    for parameter in quantized.parameters():
        if parameter.dim() < 2 or not parameter.is_floating_point():
            continue
        observer = PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric, quant_min=low, quant_max=high
        ).to(parameter.device)
        observer(parameter.float())
        scale, zero_point = observer.calculate_qparams()
        rounded = torch.fake_quantize_per_channel_affine(
            parameter.float(), scale.to(parameter.device), zero_point.to(parameter.device, torch.int32), 0, low, high
        )
        parameter.copy_(rounded.to(parameter.dtype))
    return quantized.eval()


def quantized_key(bits: int, key: str) -> str:
    """The row key of metric `key` (forget_acc, retain_acc, test_acc) of the model quantized to `bits`: int8_forget_acc."""
    return f"int{bits}_{key}"


#: The accuracies measured on each quantized model (the registered metrics of those names compute them).
QUANTIZED_METRICS = ("forget_acc", "retain_acc", "test_acc")


def quantized_scores(
    model: nn.Module, bits: list[int], accuracies: Callable[[nn.Module], dict[str, float | None]]
) -> dict[str, float | None]:
    """`accuracies` (the `QUANTIZED_METRICS` of a model, as request t scores them) of `model` quantized to each of
    `bits`, under their row keys (`quantized_key`)."""
    return {
        quantized_key(width, key): value
        for width in bits
        for key, value in accuracies(quantize_weights(model, width)).items()
    }
