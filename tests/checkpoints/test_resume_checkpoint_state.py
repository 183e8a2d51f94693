"""A resume from a checkpoint whose tensors are poisoned (NaN, Inf) or do not fit the model and optimizer the config
builds is refused before anything is built or trained, in one line that names the file and the key
(brisk.checkpoints.fits: finite, check)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers import FINISHED, assert_user_error, brisk_train, compose_cfg, tree

CONF = Path(__file__).parents[2] / "conf"


def _nan_weight(c):
    c["state_dict"]["net.8.weight"][0, 0, 0, 0] = float("nan")


def _inf_momentum(c):
    next(iter(c["optimizer_states"][0]["state"].values()))["momentum_buffer"].view(-1)[0] = float("inf")


def _narrower_head(c):
    c["state_dict"]["net.15.weight"] = c["state_dict"]["net.15.weight"][:, :31].clone()


def _one_group(c):
    c["optimizer_states"][0]["param_groups"] = c["optimizer_states"][0]["param_groups"][:1]


# How the run's last.ckpt is spoiled, and what the one line must say besides the file.
SPOILED = {
    "nan_weight": (_nan_weight, "state_dict['net.8.weight'] holds NaN"),
    "inf_optimizer_state": (_inf_momentum, "['momentum_buffer'] holds Inf"),
    "weight_of_another_shape": (_narrower_head, "model weight net.15.weight has shape (10, 31)"),
    "other_optimizer_groups": (_one_group, "1 parameter groups, where the optimizer has 2"),
}


@pytest.mark.parametrize("case", SPOILED, ids=list(SPOILED))
def test_a_poisoned_or_mismatched_checkpoint_is_refused_before_any_step(
    case, finished_run, tmp_path, brisk_root, capsys, monkeypatch
):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    # Saved with an epoch schedule, so the resume for a second epoch is one the config check lets through.
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    saved.scheduler = compose_cfg(["scheduler=step"], run).scheduler  # as a run records it
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    last = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    spoil, says = SPOILED[case]
    spoil(checkpoint)
    torch.save(checkpoint, last)
    before = tree(run)
    args = [*FINISHED, "scheduler=step", "trainer.max_epochs=2", "ckpt_path=last", f"hydra.run.dir={run}"]
    proc = brisk_train(args, brisk_root, capsys, monkeypatch)
    assert_user_error(proc, str(last), says)
    assert tree(run) == before  # no step, no checkpoint, no record, no log line
