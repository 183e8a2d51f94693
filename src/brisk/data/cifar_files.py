"""Reading, checking and downloading the CIFAR-10 python-pickle batch files.

The batches are pickles, so they are read with a restricted unpickler that only builds the
few numpy objects a CIFAR batch holds; a crafted file that would run code is refused.
torchvision's CIFAR10 class is not used because it checks the md5 of each official file,
which would refuse the generated files of `data=synthetic` that use the same format.
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import numpy as np
import torch

from brisk.errors import BriskError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
META_FILE = "batches.meta"
NUM_CLASSES = 10
IMAGE_SIZE = 32
# The official label names (batches.meta), label 0 first.
CLASS_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# The published channel statistics of the training split (0.4914, 0.4822, 0.4465 and 0.2470, 0.2435, 0.2616
# on the 0..1 scale), here on the 0..255 scale.
MEAN = (125.31, 122.95, 113.87)
STD = (62.99, 62.09, 66.70)
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"

# What the official batches (pickled by Python 2 with protocol 2) and brisk's generated ones contain.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch holds only numpy arrays")
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="bytes").load()
    except FileNotFoundError:
        raise BriskError(f"{path}: file is missing. {_FIX}") from None
    except PermissionError:  # the file is fine: deleting it would be the wrong advice
        raise BriskError(
            f"{path}: permission denied. Give your user read access (e.g. chmod -R u+rX {path.parent}), "
            "or set data.root to a copy you can read."
        ) from None
    except Exception as e:  # truncated, corrupt or hostile pickles all end here
        reason = " ".join(str(e).split())  # pickle's messages may span lines; the error is one
        raise BriskError(f"{path}: not a readable CIFAR batch ({type(e).__name__}: {reason}). {_FIX}") from None
    if not isinstance(obj, dict):
        raise BriskError(f"{path}: holds a {type(obj).__name__}, not a CIFAR batch dict. {_FIX}")
    # Python 2 pickles give bytes keys; accept str keys too.
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


_FIX = "Delete the folder and let brisk download it again (or regenerate it with data=synthetic)."


def read_batch(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch file -> (uint8 images N x 3 x 32 x 32, int64 labels N), checked."""
    path = Path(path)
    d = _unpickle(path)
    if "data" not in d or "labels" not in d:
        raise BriskError(f"{path}: has keys {sorted(d)}, a CIFAR batch needs 'data' and 'labels'. {_FIX}")
    data, labels = d["data"], np.asarray(d["labels"])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        shape = getattr(data, "shape", None)
        dtype = getattr(data, "dtype", type(data).__name__)
        raise BriskError(f"{path}: 'data' is {dtype} with shape {shape}, expected uint8 N x 3072. {_FIX}")
    if labels.ndim != 1 or len(labels) != len(data) or not np.issubdtype(labels.dtype, np.integer):
        raise BriskError(f"{path}: {labels.shape} labels for {len(data)} images. {_FIX}")
    if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        bad = int(labels[(labels < 0) | (labels >= NUM_CLASSES)][0])
        raise BriskError(f"{path}: label {bad} is outside 0..{NUM_CLASSES - 1}. {_FIX}")
    images = torch.from_numpy(np.ascontiguousarray(data)).view(-1, 3, IMAGE_SIZE, IMAGE_SIZE)
    return images, torch.from_numpy(labels.astype(np.int64))


def read_meta(folder: Path) -> list[str]:
    d = _unpickle(folder / META_FILE)
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in d.get("label_names", [])]
    if len(names) != NUM_CLASSES:
        raise BriskError(f"{folder / META_FILE}: {len(names)} label names, expected {NUM_CLASSES}. {_FIX}")
    return names


def read_split(root: str | Path, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole train or test split of `root/cifar-10-batches-py` as one uint8 tensor and its labels."""
    folder = Path(root) / FOLDER
    read_meta(folder)
    parts = [read_batch(folder / name) for name in (TRAIN_FILES if train else TEST_FILES)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def write_batch(path: Path, images: torch.Tensor, labels: torch.Tensor, batch_label: str) -> None:
    """Write a batch the way the official files are: a protocol-2 pickle with bytes keys."""
    d = {
        b"batch_label": batch_label.encode(),
        b"labels": [int(v) for v in labels],
        b"data": images.reshape(len(images), -1).numpy().astype(np.uint8),
        b"filenames": [f"img_{i:05d}.png".encode() for i in range(len(images))],
    }
    with open(path, "wb") as f:
        pickle.dump(d, f, protocol=2)


def write_meta(folder: Path, label_names: list[str], per_batch: int) -> None:
    d = {b"label_names": [n.encode() for n in label_names], b"num_cases_per_batch": per_batch, b"num_vis": 3072}
    with open(folder / META_FILE, "wb") as f:
        pickle.dump(d, f, protocol=2)


def is_present(root: str | Path) -> bool:
    folder = Path(root) / FOLDER
    return all((folder / n).is_file() for n in [*TRAIN_FILES, *TEST_FILES, META_FILE])


def check_not_partial(root: str | Path) -> None:
    """A folder that holds some of the files is damaged, not absent: name what is missing instead of
    downloading (or generating) a new set that could not replace it anyway."""
    folder = Path(root) / FOLDER
    if not folder.is_dir():
        return
    missing = [n for n in [*TRAIN_FILES, *TEST_FILES, META_FILE] if not (folder / n).is_file()]
    if missing:
        names = ", ".join(str(folder / n) for n in missing)
        raise BriskError(
            f"{names}: missing, so {folder} is incomplete. Put the file(s) back, or delete {folder} "
            "and let brisk download (or, with data=synthetic, generate) it again."
        )


def publish(staging: Path, root: Path) -> None:
    """Move a complete `staging/cifar-10-batches-py` into `root` with one rename.

    Readers never see a half-written folder; if another process published first, keep theirs.
    """
    target = root / FOLDER
    try:
        (staging / FOLDER).rename(target)
    except OSError:
        if not is_present(root):
            raise


def staging_dir(root: Path) -> tempfile.TemporaryDirectory:
    try:
        root.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryDirectory(prefix=".staging-", dir=root)
    except OSError as e:
        raise BriskError(
            f"cannot write to data directory {root} ({e.strerror}). Set data.root to a writable folder."
        ) from None


def download(root: str | Path) -> None:
    """Download and unpack the official archive once, checked against its md5.

    Everything happens in a staging folder inside `root` that is removed on any failure, so an
    interrupted download leaves nothing a later run would trust.
    """
    from torchvision.datasets.utils import download_url, extract_archive

    root = Path(root)
    with staging_dir(root) as tmp:
        tmp = Path(tmp)
        try:
            download_url(URL, str(tmp), md5=ARCHIVE_MD5)
        except Exception as e:
            raise BriskError(
                f"could not download CIFAR-10 into {root} ({type(e).__name__}: {e}). "
                f"Without network, fetch {URL} elsewhere, unpack it so that {root / FOLDER} exists, "
                "or run with data=synthetic."
            ) from None
        archive = tmp / Path(URL).name
        extract_archive(str(archive), str(tmp))
        if not is_present(tmp):
            raise BriskError(f"{URL}: the archive does not hold {FOLDER}/ as expected.")
        publish(tmp, root)
