"""The nets conf/model/ picks by name, each registered where it is defined and imported on first use."""

from brisk.utils.lazy import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {"AirbenchNet": ".airbench", "SimpleCNN": ".simple_cnn", "TimmNet": ".timm_net", "cifar_resnet18": ".resnet"},
)
