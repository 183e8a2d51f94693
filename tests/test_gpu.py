"""GPU-only checks: each test skips itself without CUDA. scripts/gpu_check.sh runs them on a GPU machine."""

from __future__ import annotations

import pytest
import torch

from conftest import TINY, read_summary, run_cli, run_dir_of

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GPU = [o for o in TINY if not o.startswith(("trainer.accelerator", "trainer.devices"))]
GPU += ["trainer=gpu", "trainer.max_epochs=1", "callbacks.progress_bar=null"]


def _train(root, *args: str) -> dict:
    return read_summary(run_dir_of(run_cli("train", [*GPU, *args], root)))


def test_auto_precision_picks_bf16_on_ampere_and_newer(brisk_root):
    s = _train(brisk_root)
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    assert s["precision"]["effective"] == expected and s["hardware"]["gpus"]


def test_16_mixed_runs_as_fp16_on_gpu(brisk_root):
    s = _train(brisk_root, "precision=16-mixed")
    assert s["precision"]["effective"] == "16-mixed" and s["metrics"]["test/acc"] > 0


def test_ddp_16_mixed_accumulation(brisk_root):
    s = _train(brisk_root, "strategy=ddp", "trainer.devices=1", "precision=16-mixed", "accumulation=4")
    assert s["accumulation"] == 4 and s["effective_batch"] == 400


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_sharded_strategies_train(brisk_root, strategy):
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed")
    s = _train(brisk_root, f"strategy={strategy}", "precision=bf16-mixed")
    assert s["metrics"]["test/acc"] > 0


def test_channels_last_and_compile(brisk_root):
    s = _train(brisk_root, "data.channels_last=true", "model.compile=true", "model=airbench")
    assert s["metrics"]["test/acc"] > 0
