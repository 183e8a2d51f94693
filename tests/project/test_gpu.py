"""GPU-only checks: each test skips itself without CUDA. scripts/gpu_check.sh runs them on a GPU machine."""

from __future__ import annotations

import pytest
import torch

from brisk.models.build import build_datamodule
from helpers import TINY, read_summary, run_cli, run_dir_of

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


def test_quiet_steps_do_not_sync_the_device(brisk_root):
    """CUDA's own check: a device sync on a step that neither logs nor redraws the bar raises."""
    import lightning as L

    from brisk import fastloop
    from brisk.run.prepare import build
    from helpers import compose_cfg

    cfg = compose_cfg([*[o for o in GPU if "progress_bar" not in o], "trainer.limit_val_batches=1"], brisk_root)
    every = cfg.callbacks.progress_bar.refresh_rate

    class Strict(L.Callback):
        quiet_steps = 0

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            quiet = not fastloop.logs_this_step(trainer) and (batch_idx + 1) % every and batch_idx >= 1
            quiet = quiet and batch_idx + 1 < trainer.num_training_batches
            Strict.quiet_steps += bool(quiet)
            torch.cuda.set_sync_debug_mode("error" if quiet else "default")

        def on_train_epoch_end(self, trainer, pl_module):
            torch.cuda.set_sync_debug_mode("default")

    trainer, datamodule, model = build(cfg)
    trainer.callbacks.append(Strict())
    try:
        trainer.fit(model, datamodule=datamodule)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step > 0
    assert Strict.quiet_steps >= 5, "too few quiet steps checked: the test would prove nothing"


def _host_to_device_copies(datamodule, device) -> tuple[int, int]:
    """(batches, host-to-device copies) of one training epoch's loader through Lightning's batch transfer."""
    from lightning.fabric.utilities.apply_func import move_data_to_device
    from torch.profiler import ProfilerActivity, profile

    batches = 0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for batch in datamodule.train_dataloader():
            move_data_to_device(batch, device)
            batches += 1
        torch.cuda.synchronize()
    copies = sum(e.count for e in prof.key_averages() if "HtoD" in e.key)
    return batches, copies


def test_resident_batches_are_not_copied_from_the_host(brisk_root):
    """data.resident: one copy of the epoch's order, none per batch; the host path (the control) copies each."""

    from helpers import compose_cfg

    device = torch.device("cuda", 0)
    counts = {}
    for on_device in (False, True):
        datamodule = build_datamodule(compose_cfg([*TINY, f"data.resident={on_device}"], brisk_root))
        datamodule.resident_device = device
        datamodule.prepare_data()
        datamodule.setup("fit")
        datamodule.placed("train")  # placed before the count, as fit does before its first step
        counts[on_device] = _host_to_device_copies(datamodule, device)
    batches, copies = counts[True]
    assert batches >= 10 and copies <= 1, counts
    assert counts[False][1] >= counts[False][0], counts


def test_speedrun_compiled_in_bf16_reaches_its_clock(brisk_root):
    """experiment=speedrun as a GPU runs it: compiled net, bf16 autocast (BatchNorm in fp32 under autocast),
    channels_last, resident data; the clock reports the test, with the compile step taken out."""
    args = [o for o in GPU if not o.startswith(("model.net.width", "callbacks.progress_bar"))]
    s = read_summary(
        run_dir_of(
            run_cli(
                "train",
                [
                    *args,
                    "experiment=speedrun",
                    "model.compile=true",
                    "precision=bf16-mixed",
                    "trainer.max_epochs=3",
                    "data.batch_size=200",
                    "model.net.widths=[32,64,64]",
                    "target_acc=0.5",
                ],
                brisk_root,
            )
        )
    )
    clock = s["time_to_accuracy"]
    assert clock["test"] is not None and clock["test"]["tta"] == "flip_translate" and s["metrics"]["test/acc"] > 0.3
    assert clock["compile_excluded_seconds"] > 0
