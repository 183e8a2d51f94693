"""A bad config stops before any data is read or process started, naming the key and the fix; what depends on the
data (the image size) stops as soon as the data is read."""

from __future__ import annotations

import os

import lightning as L
import pytest
import torch

from brisk.data.checks import augment_fits
from brisk.errors import BriskError
from brisk.run import checks, precision
from brisk.run.builder import build_datamodule
from brisk.run.prepare import build_trainer
from helpers import TINY, assert_user_error, brisk_main, compose_cfg, run_cli

CORES = len(os.sched_getaffinity(0))

BAD = {
    # overrides: (what the message must say, ...)
    "batch_not_divisible": (
        ["strategy=ddp", "trainer.devices=2", "data.batch_size=101"],
        ["data.batch_size=101", "does not split across 2 processes", "data.batch_size=100 or 102"],
    ),
    "eval_batch_not_divisible": (
        ["strategy=ddp", "trainer.devices=2", "+data.eval_batch_size=99"],
        ["data.eval_batch_size=99", "2 processes"],
    ),
    "batch_not_divisible_across_nodes": (
        ["trainer.num_nodes=3", "data.batch_size=100"],
        ["data.batch_size=100", "3 processes", "trainer.devices x trainer.num_nodes"],
    ),
    "accumulation_zero": (["trainer.accumulate_grad_batches=0"], ["trainer.accumulate_grad_batches=0", ">= 1"]),
    "accumulation_schedule": (
        ["accumulation=schedule", "callbacks.accumulation.scheduling={0:1,4:0}"],
        ["callbacks.accumulation.scheduling.4=0"],
    ),
    "unknown_precision": (["trainer.precision=17"], ["trainer.precision=17 is unknown", "bf16-mixed"]),
    "fsdp_without_cuda": (["strategy=fsdp"], ["trainer.strategy=fsdp needs CUDA", "strategy=ddp"]),
    "deepspeed_without_cuda": (["strategy=deepspeed"], ["trainer.strategy=deepspeed needs CUDA"]),
    "missing_checkpoint": (["ckpt_path=/nonexistent/last.ckpt"], ["ckpt_path=/nonexistent/last.ckpt: no such file"]),
    "more_cpu_devices_than_cores": (
        [f"trainer.devices={CORES + 1}", f"data.batch_size={100 * (CORES + 1)}"],
        [f"trainer.devices={CORES + 1}", f"{CORES} CPU cores"],
    ),
    "zero_devices": (["trainer.devices=0"], ["trainer.devices=0 must be >= 1"]),
    "device_ids_on_cpu": (["trainer.devices=[0,1]"], ["trainer.devices=[0, 1]: on CPU give a number"]),
}
if not torch.cuda.is_available():
    BAD["gpu_without_cuda"] = (["trainer.accelerator=gpu"], ["trainer.accelerator=gpu but no CUDA GPU"])
    BAD["sync_batchnorm_on_cpu"] = (["trainer.sync_batchnorm=true"], ["trainer.sync_batchnorm=true needs CUDA"])
else:
    n = torch.cuda.device_count()
    BAD["more_gpus_than_exist"] = (
        ["trainer.accelerator=gpu", f"trainer.devices={n + 1}"],
        [f"trainer.devices={n + 1}", f"{n} CUDA GPUs"],
    )


@pytest.mark.parametrize("case", BAD)
def test_bad_config_names_the_key(case, tmp_path):
    overrides, needles = BAD[case]
    cfg = compose_cfg([*TINY, *overrides], tmp_path)
    with pytest.raises(BriskError) as error:
        build_trainer(cfg)
    for needle in needles:
        assert needle in str(error.value)
    assert not (tmp_path / "data").exists()


def test_good_configs_pass(tmp_path):
    # checks.validate alone: build_trainer would really start the second rank of the ddp case.
    for overrides in (
        [],
        ["strategy=ddp", "trainer.devices=2", "data.batch_size=100"] if CORES >= 2 else [],
        ["trainer.num_nodes=2", "data.batch_size=100"],
        ["ckpt_path=last"],
        ["trainer.devices=auto"],
        ["accumulation=schedule"],
    ):
        checks.validate(compose_cfg([*TINY, *overrides], tmp_path))
    # image_folder's own default: a share of train/ validates (data.val_size=0.1)
    checks.validate(compose_cfg(["data=image_folder", f"data.root={tmp_path}"], tmp_path))


def test_stops_before_data_or_processes(tmp_path, brisk_root):
    # data=cifar10 in an empty folder: had brisk got as far as the data, it would have tried to download.
    # strategy=ddp with 2 devices: had it got as far as the launch, it would have started a second rank.
    data_root = tmp_path / "data"
    args = [
        "data=cifar10",
        f"data.root={data_root}",
        "trainer.accelerator=cpu",
        "strategy=ddp",
        "trainer.devices=2",
        "data.batch_size=101",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = run_cli("train", args, brisk_root, check=False, timeout=60)
    assert_user_error(proc, "data.batch_size=101")
    assert not data_root.exists()
    assert "MEMBER" not in proc.stdout + proc.stderr  # Lightning's line when the process group forms
    assert not (tmp_path / "run").exists()  # refused: no run directory, so no rank-1 log either


# In this process: a refusal before anything runs needs no interpreter of its own (8.6 s as a subprocess, 0.6 s here).
@pytest.mark.usefixtures("restore_logging")
def test_eval_missing_checkpoint(brisk_root, capsys, monkeypatch):
    args = ["data=synthetic", "trainer=cpu", "ckpt_path=/nonexistent.ckpt"]
    proc = brisk_main("evaluate", args, brisk_root, capsys, monkeypatch)
    assert_user_error(proc, "ckpt_path=/nonexistent.ckpt: no such file")


@pytest.mark.parametrize(
    "value, name",
    [
        ("16", "16-mixed"),
        (16, "16-mixed"),
        ("bf16", "bf16-mixed"),
        ("32", "32-true"),
        ("64", "64-true"),
        ("transformer-engine", "transformer-engine"),
        ("transformer-engine-float16", "transformer-engine-float16"),
    ],
)
def test_precision_names_lightning_accepts_pass(value, name):
    """Lightning's aliases and transformer-engine names, refused before, pass and map as Lightning maps them."""
    assert precision.name(value) == name  # refused before for 16, 16, bf16 and transformer-engine-float16
    if name in ("bf16-mixed", "32-true", "64-true"):  # what a CPU runs as asked (16 turns into bf16 there)
        trainer = L.Trainer(precision=value, accelerator="cpu", logger=False, enable_progress_bar=False)
        assert trainer.precision == name


@pytest.mark.parametrize("key", ["crop_pad", "cutout_size"])
def test_augment_sizes_follow_the_images(key, brisk_root):
    """crop_pad and cutout_size are pixels of the images the data delivers, not CIFAR-10's 32 for every dataset."""
    cfg = compose_cfg([*TINY, "augment=strong", f"data.augment.{key}=33"], brisk_root)
    checks.validate(cfg)  # no cap before the data says its size
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    with pytest.raises(BriskError, match=rf"data.augment.{key}=33 is larger than the images, which are 32x32"):
        datamodule.setup("fit")
    augment_fits({key: 33}, side=64)  # the same value on 64-pixel images (an image folder's image_size=64)


def test_a_batch_larger_than_the_training_split_is_refused_where_training_batches_it(brisk_root):
    cfg = compose_cfg([*TINY, "data.batch_size=1600"], brisk_root)  # 2000 images, 500 held out for validation
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")  # a look at the data (+show=augment) needs no whole batch
    with pytest.raises(BriskError, match="data.batch_size=1600 is larger than the training split: 1500 images"):
        datamodule.train_dataloader()
