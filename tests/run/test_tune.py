"""tune=lr and tune=batch_size: Lightning's finders print an override line, and refuse DDP up front."""

from __future__ import annotations

import json
import re

import pytest

from brisk.errors import BriskError
from brisk.run.tune import refuse_distributed
from helpers import TINY, compose_cfg, run_cli, run_dir_of

PNG = b"\x89PNG\r\n\x1a\n"


def test_lr_finder_prints_the_override_and_saves_its_plot(project):
    proc = run_cli("train", [*TINY, "tune=lr", "tune.num_training=20", "callbacks.progress_bar=null"], project)
    run_dir = run_dir_of(proc)
    line = proc.stdout.strip().splitlines()[-2]
    assert re.fullmatch(r"optimizer\.lr=\d[\d.e+-]*", line), line
    lr = float(line.partition("=")[2])
    assert 1e-8 <= lr <= 1.0  # within tune.min_lr..tune.max_lr
    plot = run_dir / "lr_find.png"
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:8] == PNG
    assert json.loads((run_dir / "tune.json").read_text())["override"] == line
    assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints").exists(), "it trained"
    assert not list(run_dir.glob(".lr_find*.ckpt")), "the finder's temporary checkpoint was left behind"


@pytest.mark.slow
def test_batch_size_finder_scales_the_global_batch_up_to_the_training_split(project):
    proc = run_cli("train", [*TINY, "tune=batch_size", "callbacks.progress_bar=null"], project)
    line = proc.stdout.strip().splitlines()[-2]
    size = int(line.removeprefix("data.batch_size="))
    # Doubling from tune.init_val=32 over the 1500 training images of TINY: 1024 is the largest that fills a batch.
    assert size == 1024, line
    assert "Batch size 512 succeeded, trying batch size 1024" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "overrides",
    [["strategy=ddp", "trainer.devices=2"], ["trainer.devices=1", "trainer.num_nodes=2"], ["strategy=ddp_spawn"]],
)
def test_tuning_refuses_more_than_one_process(tmp_path, overrides):
    cfg = compose_cfg([*TINY, "tune=lr", *overrides], tmp_path)
    with pytest.raises(BriskError, match=r"tune=lr runs in one process.*trainer.devices=1"):
        refuse_distributed(cfg)
    refuse_distributed(compose_cfg([*TINY, "tune=batch_size"], tmp_path))  # one process: no error
