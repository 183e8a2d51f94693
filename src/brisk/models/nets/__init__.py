from brisk.models.nets.airbench import AirbenchNet
from brisk.models.nets.resnet import cifar_resnet18
from brisk.models.nets.simple_cnn import SimpleCNN

__all__ = ["AirbenchNet", "SimpleCNN", "cifar_resnet18"]
