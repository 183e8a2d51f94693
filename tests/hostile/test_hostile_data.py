"""Hostile and unlucky image folders: the image cache checked like any file brisk reads, decoding bounded
before it allocates, and the cases nobody tried (a folder that changes while it is decoded, two runs that
build one cache at once). Real PNG, GIF and WebP files, real caches on a real disk, real processes where
the process boundary is the point.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import logging
import math
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from brisk.data import ImageFolderDataModule, image_cache
from brisk.data.images import PILLOW_PIXELS, TRAINING, read_image, scan
from brisk.errors import BriskError
from brisk.predict import KEYS as PREDICT_KEYS
from helpers import (
    BASE,
    assert_user_error,
    brisk_train,
    folder,
    main_in_process,
    module,
    read_summary,
    rgb,
    run_dir_of,
    tree,
    write,
)

CLASSES = ("cat", "dog")


def declared_png(path: Path, width: int, height: int) -> Path:
    """A valid PNG header that declares width x height RGB pixels, followed by a few rows of image data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = zlib.compress(b"\0" * (3 * width + 1) * 4, 9)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
    return path


def frames(n: int, seed: int) -> list[Image.Image]:
    return [Image.fromarray(rgb(seed + i)) for i in range(n)]


def first_frame(path: Path) -> torch.Tensor:
    with Image.open(path) as im:
        return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)


def warnings_of(caplog) -> list[str]:
    """brisk's warnings, but the one that these few-image folders drop images each epoch (tests/data/
    test_epoch_length.py tests that one)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "brisk" and r.levelno >= logging.WARNING and "drop_last" not in r.getMessage()
    ]


# --- the cache checked like any file ------------------------------------------------------------------


def _meta(edit):
    def damage(cache: Path) -> None:
        meta = json.loads((cache / "meta.json").read_text())
        edit(meta)
        (cache / "meta.json").write_text(json.dumps(meta))

    return damage


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# case: (damage to the cache folder, what the warning line says)
DAMAGE = {
    "truncated": (lambda c: _cut(c / "meta.json"), "meta.json is not valid JSON"),
    "missing_key": (_meta(lambda m: m.pop("labels")), "meta.json has no 'labels'"),
    "wrong_type": (_meta(lambda m: m.update(count=str(m["count"]))), "'count' is not a whole number"),
    "labels_out_of_range": (_meta(lambda m: m["labels"].__setitem__(0, 7)), "'labels' do not match"),
    "short_label_list": (_meta(lambda m: m["labels"].pop()), "6 files and 5 labels do not agree"),
    "zero_std": (_meta(lambda m: m.update(std=[0.0, 0.0, 0.0])), "every std above 0"),
    "nan_mean": (_meta(lambda m: m.update(mean=[math.nan] * 3)), "3 finite numbers"),
    "data_file_short": (lambda c: os.truncate(c / "images.u8", 100), "images.u8 holds 100 bytes, 18432 expected"),
    "data_file_missing": (lambda c: (c / "images.u8").unlink(), "images.u8 is missing"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_cache_is_named_in_one_line_and_decoded_again(case, tmp_path, caplog):
    damage, reason = DAMAGE[case]
    folder(tmp_path, per_class=3, classes=CLASSES)
    fresh = module(tmp_path)
    images, labels = (t.clone() for t in fresh.read("train"))  # copies: the damage may cut the mapped file
    mean, std = fresh.mean, fresh.std
    (cache,) = fresh.cache_dir.iterdir()
    damage(cache)
    with caplog.at_level(logging.INFO, logger="brisk"):
        again = module(tmp_path)
    (line,) = warnings_of(caplog)
    assert "the image cache is damaged" in line and reason in line and "\n" not in line
    assert torch.equal(again.read("train")[0], images) and torch.equal(again.read("train")[1], labels)
    assert (again.mean, again.std) == (mean, std)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="brisk"):
        module(tmp_path)
    assert warnings_of(caplog) == [] and not any("decoded" in r.getMessage() for r in caplog.records)
    assert [p.name for p in fresh.cache_dir.iterdir()] == [cache.name]  # rebuilt in place, nothing else left


def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build(tmp_path):
    folder(tmp_path, per_class=2, classes=CLASSES)
    (cache,) = module(tmp_path).cache_dir.iterdir()
    name = cache.name.rsplit("-", 1)[0]
    leftover = cache.parent / f".{name}-{'0' * 16}.partial"  # what a SIGKILL during a build leaves
    leftover.mkdir()
    (leftover / "images.u8").write_bytes(b"\0" * 4096)
    unrelated = cache.parent / f".{name}-notes"  # data.cache_dir may hold other things: they stay
    unrelated.mkdir()
    write(tmp_path / "train" / "cat" / "new.png", rgb(50))  # a new listing: decoded again
    module(tmp_path)
    assert not leftover.exists() and unrelated.is_dir()


def test_a_constant_channel_is_centred_not_divided_by_zero(tmp_path):
    for c, name in enumerate(CLASSES):
        for i in range(3):
            image = rgb(10 * c + i)
            image[..., 2] = 0  # blue is 0 in every image
            write(tmp_path / "train" / name / f"{i}.png", image)
    dm = module(tmp_path)
    assert dm.std[2] == 255.0 and dm.mean[2] == 0.0 and 0 < dm.std[0] < 255
    x = dm.prepare_batch(dm.read("train")[0], train=False)
    assert torch.isfinite(x).all() and (x[:, 2] == 0).all()


# --- the folder changes while its cache is built -------------------------------------------------------


def _rewrite(train: Path) -> None:
    write(train / "cat" / "0.png", rgb(77, 40, 40))


def _remove(train: Path) -> None:
    (train / "dog" / "1.png").unlink()


def _add(train: Path) -> None:
    write(train / "dog" / "9.png", rgb(78))


def _source(train: Path) -> image_cache.Source:
    """The split in `train` as ImageFolderDataModule hands it to the cache: listed now, and how to list it again."""

    def listing():
        return scan(train / "cat") + scan(train / "dog")

    entries = listing()
    return image_cache.Source(train, entries, [CLASSES.index(Path(p).parent.name) for p, _, _ in entries], listing)


@pytest.mark.parametrize("change", [_rewrite, _remove, _add], ids=["rewritten", "removed", "added"])
def test_a_folder_that_changes_while_it_is_decoded_gets_no_cache(change, tmp_path):
    """The folder changes after it was listed and before its last image is decoded: the cache would hold a
    state that never existed, keyed by one that no longer does. No cache is published."""
    folder(tmp_path, per_class=3, classes=CLASSES)
    train = tmp_path / "train"
    source = _source(train)
    change(train)
    cache_dir = tmp_path / "cache"
    with pytest.raises(BriskError, match=f"{train}: files there changed while brisk decoded them"):
        image_cache.build(cache_dir, "t", source, image_cache.Settings(32, False, 64_000_000))
    assert list(cache_dir.iterdir()) == []


# --- bounded decoding ----------------------------------------------------------------------------------


def test_multi_frame_files_give_their_first_frame_and_oversized_ones_are_bad_files(tmp_path):
    folder(tmp_path, per_class=2, classes=CLASSES)
    gif = tmp_path / "train" / "cat" / "anim.png"  # a GIF under a .png name, as downloads often are
    first, *rest = frames(3, seed=5)
    first.save(gif, format="GIF", save_all=True, append_images=rest)
    webp = tmp_path / "train" / "dog" / "anim.webp"
    first, *rest = frames(2, seed=9)
    first.save(webp, format="WEBP", save_all=True, append_images=rest, lossless=True)
    assert Image.open(gif).n_frames == 3 and Image.open(webp).n_frames == 2
    large = write(tmp_path / "train" / "dog" / "large.png", rgb(3, 40, 40))  # 1600 pixels
    with pytest.raises(BriskError, match=f"{large}: declares 40 x 40 pixels, more than data.max_pixels=1500"):
        module(tmp_path, max_pixels=1500)
    dm = module(tmp_path, max_pixels=1500, skip_bad=True)
    assert dm.skipped == {"train": 1}
    by_name = dict(zip((Path(f).name for f in dm.files("train")), dm.read("train")[0], strict=True))
    assert torch.equal(by_name["anim.png"], first_frame(gif))
    assert torch.equal(by_name["anim.webp"], torch.from_numpy(rgb(9)).permute(2, 0, 1))  # lossless: the pixels saved


# --- end to end: brisk-train on a damaged cache, and the refusals ---------------------------------------


def image_args(root: Path, *extra: str) -> list[str]:
    return [*BASE, "data=image_folder", f"data.root={root}", "data.batch_size=4", "data.val_size=2", *extra]


def test_a_damaged_cache_warns_once_and_the_run_trains(project, capsys, monkeypatch, restore_logging):  # noqa: F811
    images = project / "images"
    folder(images, per_class=6, classes=CLASSES)
    folder(images, per_class=2, classes=CLASSES, split="test", seed=500)
    (cache,) = module(images).cache_dir.glob("*-train-*")
    _meta(lambda m: m["labels"].__setitem__(0, 5))(cache)
    proc = brisk_train(image_args(images), project, capsys, monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    damaged = [line for line in (proc.stdout + proc.stderr).splitlines() if "image cache is damaged" in line]
    assert len(damaged) == 1 and "'labels' do not match" in damaged[0]
    summary = read_summary(run_dir_of(proc))
    assert summary["class_names"] == list(CLASSES) and "test/acc" in summary["metrics"]


def _one_class(root: Path):
    folder(root / "images", per_class=6, classes=("cat",))  # enough to train: batches of 4 after 2 for val
    return image_args(root / "images"), ("train: one class folder (cat)", "two or more")


def _more_than_the_disk(root: Path):
    """Four images at a size whose cache is larger than the whole disk: refused before anything is written."""
    folder(root / "images", per_class=2, classes=CLASSES)
    total = os.statvfs(root).f_blocks * os.statvfs(root).f_frsize
    size = math.isqrt(total // (3 * 4)) + 1
    return image_args(root / "images", f"data.image_size={size}"), ("data.cache_dir=", "is free", "bigger disk")


def _tmpfs(root: Path) -> Path:
    """A real filesystem of 1 MB (256 pages), or a skip where this process may not mount one."""
    cache = root / "small"
    cache.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cache)], capture_output=True).returncode:
        cache.rmdir()
        pytest.skip("mounting a tmpfs needs root (and a system that allows it)")
    _mounted.append(cache)
    return cache


def _small_filesystem(root: Path):
    """A cache of 1.6 MB for a filesystem of 1 MB: refused by the check of its free space."""
    cache = _tmpfs(root)
    folder(root / "images", per_class=4, classes=CLASSES)
    args = image_args(root / "images", f"data.cache_dir={cache}", "data.image_size=256")
    return args, (f"data.cache_dir={cache}", "needs 1.6 MB, 1.0 MB is free", "bigger disk")


def _fills_while_written(root: Path):
    """Two images of 418 x 418 take 1048344 bytes: the check of the free space passes, the pixels take all 256
    pages, and meta.json finds the filesystem full."""
    cache = _tmpfs(root)
    folder(root / "images", per_class=1, classes=CLASSES)
    args = image_args(root / "images", f"data.cache_dir={cache}", "data.image_size=418")
    return args, (f"data.cache_dir={cache}", "the disk filled up while the image cache of", "bigger disk")


def _checkpoints_on_a_small_filesystem(root: Path):
    """A width-64 net, whose checkpoint (weights and two optimizer states) takes about 4.5 MB, for checkpoints on a
    filesystem of 1 MB: refused by the size of the one model the run builds, before anything is written."""
    small = _tmpfs(root)
    args = [*BASE, "model.net.width=64", f"callbacks.model_checkpoint.dirpath={small}"]
    return args, (f"callbacks.model_checkpoint.dirpath={small}", "GB free", "one checkpoint of this model")


def _declared_bomb(root: Path):
    folder(root / "images", per_class=3, classes=CLASSES)
    bomb = declared_png(root / "images" / "train" / "dog" / "bomb.png", 60000, 60000)  # 1.8 KB, 10.8 GB decoded
    return image_args(root / "images"), (f"{bomb}: declares more than", "data.max_pixels=64000000", "skip_bad")


def _values(*overrides: str, needles: tuple[str, ...]):
    def make(root: Path):
        folder(root / "images", per_class=3, classes=CLASSES)
        return image_args(root / "images", *overrides), needles

    return make


def _links(*links: tuple[str, str], named: str):
    """Symbolic links (path under train/, target) in class folders that lead back: the one at `named` is refused."""

    def make(root: Path):
        train = folder(root / "images", per_class=3, classes=CLASSES) / "train"
        for path, target in links:
            (train / path).symlink_to(target)
        return image_args(root / "images"), (f"{train / named} is a symbolic link back", "Remove the link")

    return make


_mounted: list[Path] = []

REFUSED = {
    "one_class": _one_class,
    "cache_larger_than_the_disk": _more_than_the_disk,
    "cache_larger_than_a_small_filesystem": _small_filesystem,
    "filesystem_full_while_the_cache_is_written": _fills_while_written,
    "checkpoints_on_a_small_filesystem": _checkpoints_on_a_small_filesystem,
    "image_declares_60000x60000": _declared_bomb,
    "max_pixels_zero": _values("data.max_pixels=0", needles=("data.max_pixels=0", "in 1..")),
    "max_pixels_above_pillows_own": _values(
        f"data.max_pixels={PILLOW_PIXELS + 1}", needles=(f"data.max_pixels={PILLOW_PIXELS + 1}", f"1..{PILLOW_PIXELS}")
    ),
    "link_to_the_folder_above": _links(("cat/up", ".."), named="cat/up"),
    "link_to_itself": _links(("cat/me.png", "me.png"), named="cat/me.png"),
    "links_between_class_folders": _links(("cat/dogs", "../dog"), ("dog/cats", "../cat"), named="cat/dogs/cats"),
    "skip_bad_not_bool": _values("data.skip_bad=maybe", needles=("data.skip_bad='maybe'", "true or false")),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_with_one_line(case, project, capsys, monkeypatch, restore_logging):  # noqa: F811
    try:
        args, needles = REFUSED[case](project)
        before = tree(project)
        proc = brisk_train(args, project, capsys, monkeypatch)
        after = tree(project)
    finally:
        while _mounted:
            subprocess.run(["umount", str(_mounted.pop())], check=True)
    assert_user_error(proc, *needles)
    after.pop("images/.brisk-cache", None)  # an empty folder may stay; anything in it would be listed here
    assert after == before, "a refused run left a cache, a temporary folder or a run directory behind"


def test_links_that_do_not_loop_are_followed(tmp_path):
    folder(tmp_path, per_class=2, classes=CLASSES)
    elsewhere = folder(tmp_path / "elsewhere", per_class=1, classes=("more",), seed=60) / "train" / "more"
    for name in CLASSES:  # one folder reached twice, from two classes: not a loop
        (tmp_path / "train" / name / "more").symlink_to(elsewhere)
    dm = module(tmp_path)
    assert sorted(dm.read("train")[1].tolist()) == [0, 0, 0, 1, 1, 1]
    assert sum(Path(f).parent.name == "more" for f in dm.files("train")) == 2


@pytest.mark.parametrize("value", [0, PILLOW_PIXELS + 1, 1.5, True, "many"])
def test_max_pixels_is_checked_where_the_datamodule_is_built(value, tmp_path):
    """Built without brisk-train's config checks (a script, brisk-eval of a saved config): the same rule."""
    with pytest.raises(BriskError, match=f"must be a whole number in 1..{PILLOW_PIXELS}") as error:
        ImageFolderDataModule(root=str(tmp_path), max_pixels=value)
    assert error.value.key == "data.max_pixels"


# case: (declared width and height, max_pixels, the settings named, what the line holds, what it must not hold)
FIXES = {
    "over_pillows_own_bound": (
        (60000, 60000),
        64_000_000,
        TRAINING,
        f"declares more than {PILLOW_PIXELS} pixels, more than data.max_pixels=64000000. Shrink or delete the file, "
        "or set data.skip_bad=true to leave such images out.",
        "raise",  # no setting lifts Pillow's bound
    ),
    "over_max_pixels": (
        (100, 100),
        5000,
        TRAINING,
        "declares 100 x 100 pixels, more than data.max_pixels=5000. Shrink or delete the file, raise "
        "data.max_pixels, or set data.skip_bad=true to leave such images out.",
        None,
    ),
    "over_predicts_max_pixels": (
        (100, 100),
        5000,
        PREDICT_KEYS,
        "declares 100 x 100 pixels, more than max_pixels=5000. Shrink or delete the file, or raise max_pixels.",
        "data.",  # brisk-predict has neither data.max_pixels nor data.skip_bad
    ),
}


@pytest.mark.parametrize("case", FIXES)
def test_a_refused_image_names_only_fixes_that_help(case, tmp_path):
    (width, height), max_pixels, keys, message, absent = FIXES[case]
    path = declared_png(tmp_path / "x.png", width, height)
    with pytest.raises(BriskError) as refused:
        read_image(path, 32, max_pixels, keys)
    assert str(refused.value) == f"{path}: {message}"
    assert absent is None or absent not in str(refused.value)


def test_predict_bounds_the_pixels_of_a_run_that_has_no_such_setting(project, finished_run, capsys):
    """finished_run trained on synthetic data, whose DataModule has no max_pixels: predict's own bound holds."""
    inputs = project / "inputs"
    write(inputs / "fine.png", rgb(1))
    large = declared_png(inputs / "large.png", 9000, 9000)  # 81 MP: under Pillow's bound, 243 MB decoded
    args = [f"ckpt_path={finished_run / 'checkpoints' / 'last.ckpt'}", f"inputs={inputs}", f"hydra.run.dir={project}/o"]
    capsys.readouterr()
    status = main_in_process("predict", args, project)
    out = capsys.readouterr()
    line = assert_user_error(
        subprocess.CompletedProcess(args, status, out.out, out.err),
        f"{large}: declares 9000 x 9000 pixels, more than max_pixels=64000000",
        "raise max_pixels.",
    )
    assert "skip_bad" not in line and not (project / "o" / "predictions.csv").exists()


# --- the disk the cache is written to --------------------------------------------------------------------


def test_a_file_size_limit_is_not_reported_as_a_full_disk(tmp_path):
    """RLIMIT_FSIZE (`ulimit -f`) in this process, as FAT32's 4 GB per file would: write() fails with EFBIG
    (SIGXFSZ ignored, as a shell's ulimit leaves it to the program), and freeing space would not help."""
    folder(tmp_path / "images", per_class=1, classes=CLASSES)  # 2 images: 6144 bytes
    source, cache_dir = _source(tmp_path / "images" / "train"), tmp_path / "cache"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(BriskError) as refused:
            image_cache.build(cache_dir, "t", source, image_cache.Settings(32, False, 64_000_000))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    message = str(refused.value)
    assert message.startswith(f"data.cache_dir={cache_dir}: its filesystem cannot hold a file of 6.1 KB")
    assert "another filesystem" in message and "ulimit -f" in message and "free some space" not in message.lower()
    assert list(cache_dir.iterdir()) == []


@pytest.fixture
def small_fs(tmp_path):
    """A real filesystem of 1 MB (see _tmpfs); unmounted after the test, once nothing maps its files."""
    cache = _tmpfs(tmp_path)
    yield cache
    gc.collect()  # a DataModule's memory-mapped images would keep the filesystem busy
    while _mounted:
        subprocess.run(["umount", "--lazy", str(_mounted.pop())], check=True)


SETTINGS_300 = image_cache.Settings(300, False, 64_000_000)  # 2 images: 540000 bytes, half of small_fs


def test_a_build_measures_free_space_once_it_holds_the_lock(small_fs, tmp_path, caplog):
    """Run A holds the lock and has reserved its 540 KB of the 1 MB; run B needs the same cache. B waits for the
    lock, then uses what A published: measured before the lock, the space A took would have refused B."""
    folder(tmp_path / "images", per_class=1, classes=CLASSES)
    source = _source(tmp_path / "images" / "train")
    reference, _ = image_cache.build(tmp_path / "reference", "t", source, SETTINGS_300)
    lock = os.open(small_fs, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)  # run A
    try:
        staging = small_fs / f".{reference.name}.partial"
        staging.mkdir()
        with open(staging / "images.u8", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 2 * SETTINGS_300.image_bytes)
        result = []
        b = threading.Thread(target=lambda: result.append(_attempt(small_fs, source)))
        caplog.clear()  # the reference build's lines
        with caplog.at_level(logging.INFO, logger="brisk"):
            b.start()
            deadline = time.monotonic() + 60
            while b.is_alive() and not any("waiting for it" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            shutil.rmtree(staging)  # A publishes its cache and lets go of the lock
            shutil.copytree(reference, small_fs / reference.name)
            os.close(lock)
            lock = None
            b.join(60)
    finally:
        if lock is not None:
            os.close(lock)
    (got,) = result
    assert not isinstance(got, BriskError), str(got)
    assert got[0] == small_fs / reference.name
    assert not any("images decoded at" in r.getMessage() for r in caplog.records)


def _attempt(cache_dir: Path, source: image_cache.Source):
    try:
        return image_cache.build(cache_dir, "t", source, SETTINGS_300)
    except BriskError as e:
        return e


def test_a_damaged_cache_gives_its_space_to_the_one_that_replaces_it(small_fs, tmp_path, caplog):
    """Of the 1 MB, a damaged cache takes 540 KB and its replacement needs as much: there is room, once the
    damaged one is removed first."""
    folder(tmp_path, per_class=1, classes=CLASSES)
    first = module(tmp_path, cache_dir=str(small_fs), image_size=300)
    images = first.read("train")[0].clone()
    (cache,) = small_fs.iterdir()
    del first
    gc.collect()  # its memory map would keep the damaged file's pages after the file is removed
    _meta(lambda m: m["labels"].reverse())(cache)
    with caplog.at_level(logging.INFO, logger="brisk"):
        again = module(tmp_path, cache_dir=str(small_fs), image_size=300)
    (line,) = warnings_of(caplog)
    assert "the image cache is damaged" in line and "'labels' do not match" in line
    assert torch.equal(again.read("train")[0], images) and [p.name for p in small_fs.iterdir()] == [cache.name]


# --- two runs build one cache at once -----------------------------------------------------------------

CHILD = """
import hashlib, logging, sys, time
from pathlib import Path
from brisk.data import ImageFolderDataModule
logging.basicConfig(level=logging.INFO, format="%(message)s")
root, go = sys.argv[1], Path(sys.argv[2])
Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.002)
dm = ImageFolderDataModule(root=root, val_size=0, batch_size=4)
dm.prepare_data()
dm.setup("fit")
images, labels = dm.read("train")
print(hashlib.sha256(images.numpy().tobytes() + bytes(labels.tolist())).hexdigest())
"""


@pytest.mark.slow  # a second real process (~6-19 s); the lock's in-process cases stay in the suite
def test_two_runs_that_build_one_cache_at_once_decode_it_once(tmp_path, caplog):
    """A real second process (an flock is per open file, across processes) and this one start building the same
    cache at the same moment: one decodes, the other waits and uses what it made."""
    for c, name in enumerate(CLASSES):
        for i in range(150):  # ~0.2 s to decode: long enough for the two builds to overlap
            write(tmp_path / "images" / "train" / name / f"{i}.png", rgb(1000 * c + i, 48, 48))
    go, ready = tmp_path / "go", tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "images"), str(go), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():  # imported, and waiting for the word
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()[1][-2000:]
            time.sleep(0.01)
        go.touch()
        with caplog.at_level(logging.INFO, logger="brisk"):
            images, labels = module(tmp_path / "images").read("train")
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err[-2000:]
    assert out.strip() == hashlib.sha256(images.numpy().tobytes() + bytes(labels.tolist())).hexdigest()
    here = sum("images decoded at" in r.getMessage() for r in caplog.records)
    assert sorted([here, err.count("images decoded at")]) == [0, 1], err[-2000:]
    assert [p.name.startswith(".") for p in (tmp_path / "images" / ".brisk-cache").iterdir()] == [False]


def test_a_png_with_fewer_rows_than_it_declares_does_not_kill_the_process(tmp_path):
    """A 1 KB crafted PNG whose complete zlib stream holds 4 of the 100 rows it declares: torchvision's libpng path
    kills the process (SIGSEGV). Pillow reads it as it reads any PNG that ends early, its missing rows black; a
    PNG cut short inside its data stays a bad file."""
    path = declared_png(tmp_path / "short.png", 100, 100)
    image = read_image(path, 32, 64_000_000)
    assert image.shape == (3, 32, 32) and image.dtype == torch.uint8
    cut = tmp_path / "cut.png"
    png = tmp_path / "whole.png"
    Image.fromarray(rgb(1)).save(png)
    cut.write_bytes(png.read_bytes()[: png.stat().st_size // 2])
    with pytest.raises(BriskError, match=rf"{cut}: cannot read this image"):
        read_image(cut, 32, 64_000_000)
