"""Proof that DDP, accumulation and precision compute what they claim.

With a BatchNorm-free net, no augmentation and a fixed seed, a global batch gives the same
gradient however it is split: across ranks (DDP averages the ranks' mean gradients) or across
micro-batches (Lightning divides each micro-batch loss by the accumulation factor). BatchNorm
breaks this on purpose: its statistics are per rank and per micro-batch (see docs/distributed.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from brisk.run.prepare import build
from helpers import EXACT, TINY, compose_cfg, main_in_process, read_summary, run_cli, run_dir_of


def weights(run_dir: Path) -> tuple[dict[str, torch.Tensor], dict]:
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("net.")}, read_summary(run_dir)


def final_weights(root: Path, args: list[str]) -> tuple[dict[str, torch.Tensor], dict]:
    """brisk-train of EXACT in this process: what is compared is arithmetic, and a process of its own costs ~7 s of
    importing on 2 cores. The DDP run's ranks are processes: conftest's ddp_run."""
    run_dir = Path(tempfile.mkdtemp(prefix="equivalence-", dir=root)) / "run"
    assert main_in_process("train", [*EXACT, *args, f"hydra.run.dir={run_dir}"], root) == 0
    return weights(run_dir)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture(scope="module")
def single_batch_100(brisk_root):
    return final_weights(brisk_root, ["data.batch_size=100"])


def test_ddp_two_ranks_of_b_equal_one_process_of_2b(ddp_run, single_batch_100):
    """The ranks hold their data resident (the whole split each, on their own device): their shards of each
    epoch are still disjoint halves of the single process's batches, or the weights would differ."""
    ddp, s = weights(ddp_run[0])  # EXACT_DDP: EXACT on 2 ranks of 50
    assert s["world_size"] == 2 and s["per_device_batch"] == 50
    assert_same(ddp, single_batch_100[0])


def test_accumulating_4_micro_batches_equals_one_batch(brisk_root, single_batch_100):
    acc, s = final_weights(brisk_root, ["data.batch_size=25", "accumulation=4"])
    assert s["effective_batch"] == 100 and s["global_step"] == single_batch_100[1]["global_step"] == 15
    assert_same(acc, single_batch_100[0])


def test_the_comparison_can_fail(brisk_root, single_batch_100):
    """Without accumulation the same micro-batches take 4x the steps: the weights must differ."""
    no_acc, _ = final_weights(brisk_root, ["data.batch_size=25"])
    with pytest.raises(AssertionError):
        assert_same(no_acc, single_batch_100[0])


def test_accumulation_schedule_changes_the_factor_at_its_epochs(brisk_root):
    # a dict override merges into the default schedule, so replace it: delete, then add
    new = "{0:1,1:2,2:4}"
    key = "callbacks.accumulation.scheduling"
    schedule = ["accumulation=schedule", f"~{key}", f"+{key}={new}"]
    _, s = final_weights(brisk_root, [*schedule, "trainer.max_epochs=3"])
    # 15 batches an epoch: 15 steps at factor 1, then ceil(15/2) = 8, then ceil(15/4) = 4
    assert s["global_step"] == 15 + 8 + 4
    assert s["accumulation"] == 4


PRECISIONS = ["32", "64", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_trains_on_cpu(precision, brisk_root):
    cfg = compose_cfg(
        [
            *TINY,
            f"precision={precision}",
            "trainer.max_steps=3",
            "callbacks=none",
            "trainer.limit_val_batches=1",
            "trainer.enable_progress_bar=false",
        ],
        brisk_root,
    )
    trainer, datamodule, model = build(cfg)
    before = [p.detach().clone() for p in model.net.parameters()]
    trainer.fit(model, datamodule=datamodule)
    loss = trainer.callback_metrics["train/loss"]
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b.to(a.dtype)) for a, b in zip(before, model.net.parameters(), strict=True))
    expected = {"16-mixed": "bf16-mixed"}.get(precision, precision)  # fp16 AMP does not exist on CPU
    assert trainer.precision.replace("-true", "") == expected.replace("-true", "")


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_16_mixed_on_cpu_says_what_it_ran_as(brisk_root):
    proc = run_cli("train", [*TINY, "precision=16-mixed", "trainer.max_steps=2", "callbacks=none"], brisk_root)
    assert "precision=16-mixed is not available here: running as bf16-mixed" in proc.stdout + proc.stderr
    s = read_summary(run_dir_of(proc))
    assert s["precision"] == {"requested": "16-mixed", "effective": "bf16-mixed"}
