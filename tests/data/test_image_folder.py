"""data=image_folder: real image files in real folders, read by the real decoders, cached, split and counted."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from brisk.data import ImageFolderDataModule, prepare_images
from brisk.errors import BriskError
from helpers import folder, module, rgb, write


def test_grayscale_palette_rgba_and_mixed_sizes(tmp_path):
    gray = rgb(1)[:, :, 0]
    write(tmp_path / "train" / "a" / "gray.png", gray)
    write(tmp_path / "train" / "a" / "palette.png", rgb(2), mode="P")
    write(tmp_path / "train" / "a" / "rgba.png", rgb(3), mode="RGBA")
    write(tmp_path / "train" / "b" / "wide.png", np.full((40, 64, 3), (10, 200, 30), np.uint8))  # resized + cropped
    write(tmp_path / "train" / "b" / "small.bmp", np.full((20, 20, 3), 77, np.uint8))
    write(tmp_path / "train" / "b" / "photo.jpg", rgb(4, 48, 48))
    write(tmp_path / "train" / "b" / "web.webp", rgb(5, 16, 24))
    dm = module(tmp_path)
    assert dm.class_names == ["a", "b"] and dm.num_classes == 2
    images, labels = dm.read("train")
    assert images.shape == (7, 3, 32, 32) and images.dtype == torch.uint8
    files = [Path(f).name for f in dm.files("train")]
    by_name = dict(zip(files, images, strict=True))
    assert torch.equal(by_name["gray.png"], torch.from_numpy(gray).expand(3, 32, 32))  # grey in all three channels
    for name in ("palette.png", "rgba.png"):  # as Pillow converts them to RGB
        with Image.open(tmp_path / "train" / "a" / name) as im:
            assert torch.equal(by_name[name], torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1))
    assert torch.equal(
        by_name["wide.png"], torch.tensor([10, 200, 30], dtype=torch.uint8).view(3, 1, 1).expand(3, 32, 32)
    )
    assert (by_name["small.bmp"] == 77).all()
    assert sorted(labels.tolist()) == [0, 0, 0, 1, 1, 1, 1]
    # the public preparation for prediction gives the same pixels as training
    again = prepare_images([tmp_path / "train" / "b" / "wide.png", tmp_path / "train" / "a" / "gray.png"], 32)
    assert torch.equal(again[0], by_name["wide.png"]) and torch.equal(again[1], by_name["gray.png"])


def _cache_entries(dm: ImageFolderDataModule) -> list[str]:
    return sorted(p.name for p in dm.cache_dir.iterdir())


def test_corrupt_image_stops_with_its_name_or_is_skipped(tmp_path):
    folder(tmp_path, per_class=3)
    truncated = tmp_path / "train" / "dog" / "1.png"
    truncated.write_bytes(truncated.read_bytes()[:200])
    garbage = tmp_path / "train" / "eel" / "x.jpg"
    garbage.write_bytes(os.urandom(300))
    with pytest.raises(BriskError, match=f"{truncated}: cannot read this image .*data.skip_bad=true"):
        module(tmp_path)
    dm = ImageFolderDataModule(root=str(tmp_path))
    assert _cache_entries(dm) == [], "a failed decode left a cache (or its temporary folder) behind"
    dm = module(tmp_path, skip_bad=True)
    assert dm.skipped == {"train": 2}
    assert len(dm.splits["train"].rows) == 3 * 3 - 1


def test_changed_folder_rebuilds_the_cache(tmp_path):
    folder(tmp_path, per_class=3)
    first = module(tmp_path)
    (cache,) = _cache_entries(first)
    pixels = first.cache_dir / cache / "images.u8"
    stamp = pixels.stat().st_mtime_ns
    again = module(tmp_path)
    assert _cache_entries(again) == [cache] and pixels.stat().st_mtime_ns == stamp  # reused, not decoded again
    write(tmp_path / "train" / "cat" / "new.png", rgb(99))
    changed = module(tmp_path)
    assert len(changed.splits["train"].rows) == 10
    (rebuilt,) = _cache_entries(changed)  # the stale one is gone
    assert rebuilt != cache
    os.utime(tmp_path / "train" / "dog" / "0.png", ns=(1, 1))  # same list and sizes, another mtime
    assert _cache_entries(module(tmp_path)) != [rebuilt]


def test_statistics_match_a_direct_computation(tmp_path):
    folder(tmp_path, per_class=5)
    dm = module(tmp_path, val_size=3)
    pixels = np.stack(
        [
            np.asarray(Image.open(p).convert("RGB"), dtype=np.float64)
            for p in sorted((tmp_path / "train").rglob("*.png"))
        ]
    )
    mean, std = pixels.mean(axis=(0, 1, 2)), pixels.std(axis=(0, 1, 2))
    np.testing.assert_allclose(dm.mean, mean, rtol=1e-9)
    np.testing.assert_allclose(dm.std, std, rtol=1e-9)
    assert dm.state_dict()["mean"] == dm.mean  # what the checkpoint holds
    # and what normalizes the batches: zero mean, unit std per channel over the whole set
    x = dm.prepare_batch(torch.from_numpy(pixels.astype(np.uint8)).permute(0, 3, 1, 2), train=False)
    torch.testing.assert_close(x.mean((0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(x.std((0, 2, 3), correction=0), torch.ones(3), atol=1e-5, rtol=0)


def test_val_and_test_folders_or_their_absence(tmp_path):
    folder(tmp_path, per_class=4)
    dm = module(tmp_path, val_size=0.25)
    assert len(dm.splits["val"].rows) == 3 and len(dm.splits["train"].rows) == 9
    assert set(dm.splits["val"].rows.tolist()).isdisjoint(dm.splits["train"].rows.tolist())
    with pytest.warns(UserWarning, match="no test split: the test stage is skipped"):
        dm.setup("test")
    assert dm.test_dataloader() == []
    folder(tmp_path, per_class=2, classes=("cat", "eel"), split="val", seed=7)
    folder(tmp_path, per_class=1, split="test", seed=9)
    dm = module(tmp_path, val_size=0.25)
    dm.setup("test")
    assert len(dm.splits["val"].rows) == 4 and len(dm.splits["train"].rows) == 12  # val/ is used whole
    assert sorted(dm.splits["val"].labels.tolist()) == [0, 0, 2, 2]
    assert len(dm.test_dataloader()) == 1
    write(tmp_path / "test" / "fox" / "0.png", rgb(1))
    with pytest.raises(BriskError, match="class 'fox' has no folder in"):
        module(tmp_path)


def test_no_train_folder_says_what_the_layout_is(tmp_path):
    with pytest.raises(BriskError, match="no train/ folder there. An image folder holds train/<class>/<images>"):
        ImageFolderDataModule(root=str(tmp_path)).class_names  # noqa: B018
    with pytest.raises(BriskError, match="data.root is not set: brisk-train data=image_folder data.root="):
        ImageFolderDataModule(root=None)
    with pytest.raises(BriskError, match="data.image_size=0 must be"):
        ImageFolderDataModule(root=str(tmp_path), image_size=0)


def test_train_size_takes_a_fixed_subset_after_the_val_split(tmp_path):
    folder(tmp_path, per_class=10)
    whole = module(tmp_path, val_size=6)
    half = module(tmp_path, val_size=6, train_size=0.5)
    twelve = module(tmp_path, val_size=6, train_size=12)
    assert torch.equal(half.splits["val"].rows, whole.splits["val"].rows)  # the val split does not move
    assert len(half.splits["train"].rows) == 12 and len(twelve.splits["train"].rows) == 12
    assert torch.equal(half.splits["train"].rows, twelve.splits["train"].rows)  # seeded by split_seed
    assert set(half.splits["train"].rows.tolist()) < set(whole.splits["train"].rows.tolist())
    other = module(tmp_path, val_size=6, train_size=12, split_seed=1)
    assert not torch.equal(other.splits["train"].rows, half.splits["train"].rows)
    with pytest.raises(BriskError, match="data.train_size=100 gives 100 images"):
        module(tmp_path, val_size=6, train_size=100)


def test_dedup_drops_exact_copies_and_counts_those_in_test(tmp_path):
    folder(tmp_path, per_class=6)  # 18 distinct images
    train = tmp_path / "train"
    for i, (src, dst) in enumerate([("cat/0", "cat/copy"), ("cat/0", "dog/copy"), ("eel/5", "eel/copy")]):
        (train / f"{dst}{i}.png").write_bytes((train / f"{src}.png").read_bytes())
    write(train / "dog" / "resaved.bmp", np.asarray(Image.open(train / "dog" / "2.png")))  # same pixels, other bytes
    for i, src in enumerate(["cat/1", "eel/5"]):  # train images that also sit in test/
        write(tmp_path / "test" / "cat" / f"{i}.png", np.asarray(Image.open(train / f"{src}.png")))
    write(tmp_path / "test" / "cat" / "fresh.png", rgb(12345))
    kept = module(tmp_path, val_size=4, dedup=True)
    assert kept.dedup_report == {"dropped": 4, "kept": 18, "also_in_test": 2}
    assert len(kept.splits["train"].rows) + len(kept.splits["val"].rows) == 18
    plain = module(tmp_path, val_size=4)
    assert plain.dedup_report is None and len(plain.splits["train"].rows) + 4 == 22
