"""brisk's DataModules and their parts; each public name is imported on first use (brisk.utils.lazy)."""

from brisk.utils.lazy import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "CIFAR10DataModule": ".cifar",
        "ImageFolderDataModule": ".image_folder",
        "SyntheticDataModule": ".cifar",
        "TensorDataModule": ".base",
        "prepare_images": ".images",
    },
)
