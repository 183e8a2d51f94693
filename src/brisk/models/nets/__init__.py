"""The nets conf/model/ picks by name, each registered where it is defined and imported on first use."""

from brisk.utils.lazy import exports

_WHERE = {"AirbenchNet": ".airbench", "SimpleCNN": ".simple_cnn", "TimmNet": ".timm_net", "cifar_resnet18": ".resnet"}
__all__ = list(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
