"""callbacks=early_stopping: Lightning's EarlyStopping on val/acc stops a run before trainer.max_epochs."""

from __future__ import annotations

from helpers import TINY, main_in_process, read_summary

SMALL = ["data.synthetic.n_train=400", "data.synthetic.n_test=100", "data.val_size=100", "callbacks.progress_bar=null"]


def test_early_stopping_stops_a_run_that_stops_improving(tmp_path):
    # No epoch improves val/acc by 1.0, so the second epoch is one without improvement: patience 1 stops there.
    run_dir = tmp_path / "run"
    args = ["callbacks=early_stopping", "callbacks.early_stopping.patience=1", "callbacks.early_stopping.min_delta=1.0"]
    overrides = [*TINY, *SMALL, "trainer.max_epochs=5", *args, f"hydra.run.dir={run_dir}"]
    assert main_in_process("train", overrides, tmp_path) == 0
    summary = read_summary(run_dir)
    assert summary["epochs"] == 2 and summary["global_step"] == 2 * 3  # 300 training images at batch 100
    assert "test/acc" in summary["metrics"]  # tested after the early stop, as after any fit
