from brisk.models.nets.airbench import AirbenchNet
from brisk.models.nets.resnet import cifar_resnet18
from brisk.models.nets.simple_cnn import SimpleCNN
from brisk.models.nets.timm_net import TimmNet

__all__ = ["AirbenchNet", "SimpleCNN", "TimmNet", "cifar_resnet18"]
