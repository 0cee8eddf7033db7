"""`timm:<name>`: any timm model by name, randomly initialized (weights are never downloaded).

Models that take an image size (ViT, Swin, ...) get the dataset's; the others ignore it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import nn

from unlearnbench.registry import ARCHS, UnknownNameError


def create(name: str, num_classes: int, in_channels: int = 3, input_size: int = 224) -> nn.Module:
    import timm  # here, not above: the arch registry imports this module for every run, and timm costs a second

    arguments = {"pretrained": False, "num_classes": num_classes, "in_chans": in_channels}
    try:
        return timm.create_model(name, img_size=input_size, **arguments)
    except TypeError as error:
        if "img_size" not in str(error):
            raise
        return timm.create_model(name, **arguments)


@ARCHS.register_prefix("timm")
def timm_model(name: str) -> Callable[..., nn.Module]:
    """timm:<name>: any model of `timm.list_models()`, randomly initialized."""
    import timm

    if not name or not timm.is_model(name):
        raise UnknownNameError(f"unknown timm model {name!r}; see timm.list_models() for the names")
    factory = partial(create, name)
    factory.__doc__ = f"timm model {name} (randomly initialized)"
    return factory
