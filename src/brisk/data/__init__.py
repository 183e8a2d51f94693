from brisk.data.base import TensorDataModule
from brisk.data.cifar import CIFAR10DataModule, SyntheticDataModule
from brisk.data.image_folder import ImageFolderDataModule
from brisk.data.images import prepare_images

__all__ = ["CIFAR10DataModule", "ImageFolderDataModule", "SyntheticDataModule", "TensorDataModule", "prepare_images"]
