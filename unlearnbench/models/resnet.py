"""ResNet-18 (CIFAR stem), ResNet-50 and Swin-T, built with timm (never with pretrained weights).

timm's models already expose `forward_features` / `forward_head(x, pre_logits)` /
`get_classifier()`, which is the interface every unlearnbench arch follows. timm is imported by the factory that
builds one: the arch registry imports this module for every run, and importing timm costs a second.
"""

from __future__ import annotations

from torch import nn

from unlearnbench.registry import ARCHS


@ARCHS.register("resnet18")
def resnet18(num_classes: int, in_channels: int = 3, input_size: int = 32) -> nn.Module:
    """ResNet-18 with a CIFAR stem (3x3 stride-1 conv, no max-pool), as in SalUn; 512-wide head."""
    import timm

    model = timm.create_model("resnet18", pretrained=False, num_classes=num_classes, in_chans=in_channels)
    model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


@ARCHS.register("resnet50")
def resnet50(num_classes: int, in_channels: int = 3, input_size: int = 224) -> nn.Module:
    """ResNet-50 (ImageNet stem, torchvision's v1.5 layout via timm), 2048-wide head."""
    import timm

    return timm.create_model("resnet50", pretrained=False, num_classes=num_classes, in_chans=in_channels)


@ARCHS.register("swin_t")
def swin_t(num_classes: int, in_channels: int = 3, input_size: int = 224) -> nn.Module:
    """Swin-T (patch 4, window 7) with its image size set to the dataset's (timm clamps windows)."""
    import timm

    return timm.create_model(
        "swin_tiny_patch4_window7_224",
        pretrained=False,
        num_classes=num_classes,
        in_chans=in_channels,
        img_size=input_size,
    )
