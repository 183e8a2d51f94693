"""Unchecked values of brisk-predict, brisk-export, tune=lr|batch_size and a resume, and `make rename NAME=...`.

Each bad value is refused by the entry point's real main() (Hydra included) in this process, before a checkpoint
is read: exit status 2, one `brisk: error:` line naming the key or file, nothing written. The rename cases run
real `make` in a copy of the project.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torchvision.io import write_png

from brisk.data.images import PILLOW_PIXELS
from helpers import FINISHED, assert_user_error, main_in_process, tree
from project_copy import clean_env, copy_project

PREDICT = ["ckpt_path={ckpt}", "inputs={root}/images"]
EXPORT = ["ckpt_path={ckpt}"]
LR, BATCH = [*FINISHED, "tune=lr"], [*FINISHED, "tune=batch_size"]

# case: (entry point, overrides, what the error line must hold); {root} is the project, {ckpt} a real checkpoint.
CASES = {
    # brisk-predict
    "predict_batch_zero": ("predict", [*PREDICT, "batch_size=0"], ("batch_size=0", "whole number >= 1")),
    "predict_top_k_word": ("predict", [*PREDICT, "top_k=two"], ("top_k='two'", "whole number >= 1")),
    "predict_seed_negative": ("predict", [*PREDICT, "seed=-1"], ("seed=-1", "0..2**32-1")),
    "predict_inputs_empty": ("predict", [*PREDICT, "inputs="], ("inputs is empty",)),
    "predict_max_pixels_zero": ("predict", [*PREDICT, "max_pixels=0"], ("max_pixels=0", f"in 1..{PILLOW_PIXELS}")),
    "predict_max_pixels_above_pillows_own": (
        "predict",
        [*PREDICT, f"max_pixels={PILLOW_PIXELS + 1}"],
        (f"max_pixels={PILLOW_PIXELS + 1}", f"in 1..{PILLOW_PIXELS}"),
    ),
    "predict_link_to_its_folder": (
        "predict",
        [*PREDICT, "inputs={root}/loop_dir"],
        ("inputs={root}/loop_dir:", "{root}/loop_dir/back is a symbolic link back"),
    ),
    "predict_link_to_itself": (
        "predict",
        [*PREDICT, "inputs={root}/self_dir"],
        ("inputs={root}/self_dir:", "{root}/self_dir/me.png is a symbolic link"),
    ),
    "predict_glob_through_a_loop": (
        "predict",
        [*PREDICT, "inputs={root}/loop_dir/**/*.png"],
        ("inputs={root}/loop_dir/**/*.png:", "{root}/loop_dir/back is a symbolic link back"),
    ),
    # brisk-eval
    "eval_seed_negative": ("evaluate", [*EXPORT, "seed=-1"], ("seed=-1", "0..2**32-1")),
    # the run's own value would be dropped for the command line's, which was none: a TypeError in the test loader
    "eval_tests_nothing": (
        "evaluate",
        [*EXPORT, "trainer.limit_test_batches=0"],
        ("trainer.limit_test_batches=0", "> 0"),
    ),
    "eval_batch_no_value": ("evaluate", [*EXPORT, "data.batch_size=???"], ("data.batch_size: no value",)),
    # brisk-export
    "export_calibration_zero": (
        "export",
        [*EXPORT, "quantize=int8", "export.calibration_batches=0"],
        ("export.calibration_batches=0", ">= 1"),
    ),
    "export_bench_runs_zero": ("export", [*EXPORT, "export.bench_runs=0"], ("export.bench_runs=0", ">= 1")),
    "export_bench_batch_zero": ("export", [*EXPORT, "export.bench_batch=0"], ("export.bench_batch=0", ">= 1")),
    "export_threads_zero": ("export", [*EXPORT, "export.threads=0"], ("export.threads=0", ">= 1 (or null)")),
    "export_tolerance_negative": ("export", [*EXPORT, "export.tolerance=-1"], ("export.tolerance=-1", ">= 0")),
    "export_reduce_range_word": (
        "export",
        [*EXPORT, "export.reduce_range=maybe"],
        ("export.reduce_range='maybe'", "true or false"),
    ),
    "export_seed_negative": ("export", [*EXPORT, "seed=-1"], ("seed=-1",)),
    "export_data_batch_zero": ("export", [*EXPORT, "+data.batch_size=0"], ("data.batch_size=0", ">= 1")),
    # tune=lr
    "lr_num_training_zero": ("train", [*LR, "tune.num_training=0"], ("tune.num_training=0", ">= 1")),
    "lr_min_lr_zero": ("train", [*LR, "tune.min_lr=0"], ("tune.min_lr=0", "> 0")),
    "lr_max_lr_zero": ("train", [*LR, "tune.max_lr=0"], ("tune.max_lr=0", "> 0")),
    "lr_min_above_max": ("train", [*LR, "tune.min_lr=0.5", "tune.max_lr=0.1"], ("tune.min_lr=0.5", "tune.max_lr")),
    "lr_mode_unknown": ("train", [*LR, "tune.mode=cubic"], ("tune.mode=cubic", "exponential or linear")),
    "lr_early_stop_zero": ("train", [*LR, "tune.early_stop_threshold=0"], ("tune.early_stop_threshold=0",)),
    "lr_unknown_key": ("train", [*LR, "+tune.num_trainng=50"], ("tune.num_trainng", "tune.num_training")),
    "lr_seed_negative": ("train", [*LR, "seed=-1"], ("seed=-1",)),
    # the method of the other finder, with this finder's keys: the group option picks the finder
    "lr_method_of_batch": (
        "train",
        [*LR, "tune.method=scale_batch_size"],
        ("tune.method=scale_batch_size", "tune=batch_size"),
    ),
    # tune=batch_size
    "batch_init_val_zero": ("train", [*BATCH, "tune.init_val=0"], ("tune.init_val=0", ">= 1")),
    "batch_max_trials_zero": ("train", [*BATCH, "tune.max_trials=0"], ("tune.max_trials=0", ">= 1")),
    "batch_steps_per_trial_zero": ("train", [*BATCH, "tune.steps_per_trial=0"], ("tune.steps_per_trial=0",)),
    "batch_max_val_zero": ("train", [*BATCH, "tune.max_val=0"], ("tune.max_val=0", ">= 1")),
    "batch_margin_one": ("train", [*BATCH, "tune.margin=1.5"], ("tune.margin=1.5", "[0, 1)")),
    "batch_mode_unknown": ("train", [*BATCH, "tune.mode=triple"], ("tune.mode=triple", "power or binsearch")),
    "batch_method_of_lr": ("train", [*BATCH, "tune.method=lr_find"], ("tune.method=lr_find", "tune=lr")),
    # a resume from a torch file that is not a Lightning checkpoint
    "resume_a_state_dict": (
        "train",
        [*FINISHED, "ckpt_path={root}/weights.pt"],
        ("ckpt_path={root}/weights.pt", "not a Lightning checkpoint", "state_dict", "optimizer"),
    ),
    "resume_a_partial_dict": (
        "train",
        [*FINISHED, "ckpt_path={root}/partial.pt"],
        ("ckpt_path={root}/partial.pt", "no pytorch-lightning_version", "loops"),
    ),
    "resume_last_holding_a_tensor": (
        "train",
        [*FINISHED, "ckpt_path=last", "hydra.run.dir={root}/run"],
        ("ckpt_path=last ({root}/run/checkpoints/last.ckpt)", "a Tensor", "not a Lightning checkpoint"),
    ),
}


def prepare(root: Path, finished_run: Path) -> None:
    """The files the cases name: images, folders with looping links, torch files that are not checkpoints."""
    for folder in ("images", "loop_dir", "self_dir"):
        (root / folder).mkdir()
        write_png(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8), str(root / folder / "0.png"))
    (root / "loop_dir" / "back").symlink_to(".", target_is_directory=True)
    (root / "self_dir" / "me.png").symlink_to("me.png")
    checkpoint = torch.load(finished_run / "checkpoints" / "last.ckpt", weights_only=True)
    torch.save(checkpoint["state_dict"], root / "weights.pt")  # torch.save(model.state_dict()): the usual mix-up
    torch.save({"state_dict": checkpoint["state_dict"], "epoch": 0}, root / "partial.pt")
    shutil.copytree(finished_run, root / "run", symlinks=True)
    torch.save(torch.zeros(3), root / "run" / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("case", CASES)
def test_a_bad_value_is_refused_before_anything_is_read(case, project, finished_run, capsys, monkeypatch):
    module, overrides, needles = CASES[case]
    prepare(project, finished_run)
    places = {"root": project, "ckpt": finished_run / "checkpoints" / "last.ckpt"}
    args = [a.format(**places) for a in overrides]
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args.append(f"hydra.run.dir={project / 'out'}")
    monkeypatch.chdir(project)  # inputs= names the current folder
    before = tree(project)
    capsys.readouterr()
    status = main_in_process(module, args, project)
    out = capsys.readouterr()
    assert_user_error(
        subprocess.CompletedProcess(args, status, out.out, out.err), *(n.format(**places) for n in needles)
    )
    assert tree(project) == before, "a refused command wrote, removed or changed files"


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return copy_project(tmp_path_factory.mktemp("rename"))


@pytest.mark.parametrize(
    "name",
    [
        'x";touch {marker};echo "',  # the quote closed the recipe's "$(NAME)": the touch ran, and make exited 0
        "$(touch {marker})",  # make read it as a variable and passed an empty name
        "$(shell touch {marker})",
        "`touch {marker}`",
        "--help",  # an option of the script: it printed its help and exited 0
    ],
)
def test_make_rename_passes_the_name_verbatim_and_fails_when_refused(name, copy, tmp_path):
    marker = tmp_path / "ran"
    name = name.format(marker=marker)
    before = tree(copy)
    proc = subprocess.run(
        ["make", "-s", "rename", f"NAME={name}", f"PY={sys.executable}"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert f"rename: error: '{name}' is not a Python identifier" in proc.stderr, proc.stderr
    assert not marker.exists(), "make ran code from the name"
    assert tree(copy) == before
