"""A stop signal (SIGTERM, SIGINT) ends a run the same way in one process and in a DDP job: one checkpoint,
a resume hint, exit status 128 + the signal, every process gone. Real processes, real signals, real gloo DDP.

The signal is sent by the run to itself at one exact batch (tests/signal_at.py), on rank 0 only: to the
operating system that is `kill <rank 0 pid>`, and the batch it stops after is known.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from background import background_train
from helpers import SLURM_ENV, TINY, env_with_tests, processes_of, read_summary, run_cli

# 8 optimizer steps per epoch (1200 - 400 images, batches of 100), split over 2 ranks when DDP.
ARGS = [
    *TINY,
    "data.synthetic.n_train=1200",
    "data.val_size=400",
    "trainer.max_epochs=1",
    "scheduler=none",
    "callbacks.progress_bar=null",
]
DDP = ["strategy=ddp", "trainer.devices=2"]
# The processes of a started 2-rank job: the job process, whose TorchElastic agent started them, and its two ranks.
PROCESSES = 3


def signal_at(batch: int, signum: int, sent: Path, rank: int | None = None) -> list[str]:
    """Overrides that make the run send itself `signum` at the end of batch `batch` of epoch 0."""
    cb = "+callbacks.signal_at"
    args = ["imports=[signal_at]", f"{cb}.type=sigterm_at", f"{cb}.hook=train_batch_end", f"{cb}.batch={batch}"]
    return [
        *args,
        f"{cb}.signum={int(signum)}",
        f"{cb}.sent={sent}",
        *([f"{cb}.rank={rank}"] if rank is not None else []),
    ]


def saved_step(run_dir: Path) -> int:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"]


def test_sigterm_to_rank_0_alone_stops_the_whole_ddp_job_with_one_checkpoint(project):
    run_dir, sent = project / "run", project / "sent"
    args = [*ARGS, *DDP, f"hydra.run.dir={run_dir}"]
    with background_train([*args, *signal_at(2, signal.SIGTERM, sent, rank=0)], project, env=env_with_tests()) as proc:
        proc.wait(timeout=180)  # without forwarding and agreement this hangs for good
        ended = time.time()
        out, err = proc.output()
        left = processes_of(project)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert ended - float(sent.read_text()) < 20, "the job took too long to stop"
    assert left == [], "a rank outlived rank 0"
    # rank 1 stopped by the agreement, before the agent's SIGTERM (once agreed, a late one is ignored unsaid)
    rank1 = "".join(f.read_text() for f in run_dir.glob("ranks/*/attempt_0/1/std*.log"))
    assert "GLOBAL_RANK: 1" in rank1 and "received" not in rank1 and "Traceback" not in rank1, rank1[-3000:]
    # Both ranks stop one batch after the one rank 0 was signalled in (batch 2: global step 3; the ranks
    # agree asynchronously, a batch later), and save it once.
    assert "brisk: interrupted by SIGTERM at global step 4 (epoch 0); saved " in err
    assert err.count("brisk: interrupted") == 1
    assert saved_step(run_dir) == 4
    assert not (run_dir / "summary.json").exists()
    # The checkpoint resumes: the same job, with ckpt_path=last, finishes the epoch on both ranks.
    resumed = run_cli("train", [*args, "ckpt_path=last"], project)
    assert f"Restoring states from the checkpoint path at {run_dir / 'checkpoints' / 'last.ckpt'}" in (
        resumed.stdout + resumed.stderr
    )
    s = read_summary(run_dir)
    assert (s["global_step"], s["world_size"]) == (8, 2)


def test_ctrl_c_saves_a_checkpoint_prints_the_hint_and_exits_130(project):
    run_dir, sent = project / "run", project / "sent"
    args = [*ARGS, f"hydra.run.dir={run_dir}", *signal_at(2, signal.SIGINT, sent)]
    proc = run_cli("train", args, project, check=False, env=env_with_tests())
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-3000:]
    assert "KeyboardInterrupt" not in proc.stderr
    last = run_dir / "checkpoints" / "last.ckpt"
    assert f"brisk: interrupted by SIGINT at global step 3 (epoch 0); saved {last}" in proc.stderr
    assert f"Resume with the same overrides plus ckpt_path=last hydra.run.dir={run_dir}" in proc.stderr
    assert saved_step(run_dir) == 3

    # The same Ctrl-C in a trial of an Optuna search: the search, not the trial's run, is what resumes, and only
    # by running the search again (tests/search/test_search.py resumes one), so that is what the line says.
    url = f"sqlite:///{project / 'optuna.db'}"
    search = ["-m", "hparams_search=optuna", "hydra.sweeper.params=null", "optimizer.lr=choice(0.05)"]
    proc = run_cli(
        "train",
        [*search, f"hydra.sweeper.storage={url}", *ARGS, *signal_at(2, signal.SIGINT, sent)],
        project,
        check=False,
        env=env_with_tests(),
    )
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-3000:]
    assert (
        "brisk: interrupted by SIGINT at global step 3 (epoch 0). This was trial 0 of the search (study brisk in "
        f"{url}): resume the search by running the same command; its finished trials are kept and trial 0's "
        "parameters are tried again from the start." in proc.stderr
    ), proc.stderr[-3000:]
    assert "ckpt_path=last" not in proc.stderr


@pytest.mark.slow  # two real SLURM-like tasks of a DDP job (~30 s on 2 cores each)
@pytest.mark.parametrize(
    "hook, batch, step",
    [
        ("train_batch_end", 2, 4),  # sent in batch 2; agreed a batch later, after batch 3: global step 4
        ("validation_start", 0, 8),  # sent after the last training batch: done at the end of training
    ],
)
def test_slurm_requeue_signal_to_rank_0_alone_saves_on_every_rank_and_trains_on(hook, batch, step, project):
    """SIGUSR1 (`#SBATCH --signal=SIGUSR1@90`) that reached only rank 0: Lightning's handler would save from inside
    the signal handler, and the save's barrier would wait for rank 1 for good. The ranks agree on it, save
    hpc_ckpt_1.ckpt together after the same batch, and train on (SLURM itself ends a requeued job; here there
    is no `scontrol`, so the requeue fails with Lightning's warning and the job finishes)."""
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    run_dir, sent = project / "run", project / "sent"
    at = [a.replace("hook=train_batch_end", f"hook={hook}") for a in signal_at(batch, signal.SIGUSR1, sent, rank=0)]
    args = [*ARGS, *DDP, f"hydra.run.dir={run_dir}", *at]
    task = {**SLURM_ENV, "SLURM_JOB_ID": str(os.getpid()), "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2"}
    port = str(find_free_network_port())
    with contextlib.ExitStack() as stack:
        ranks = [
            stack.enter_context(
                background_train(
                    args,
                    project,
                    env={**env_with_tests(), **task, "SLURM_PROCID": r, "SLURM_LOCALID": r, "MASTER_PORT": port},
                )
            )
            for r in ("0", "1")
        ]
        for proc in ranks:
            proc.wait(timeout=240)  # without the agreement rank 0 waits in the save's barrier for good
        err = ranks[0].output()[1]
    assert [p.returncode for p in ranks] == [0, 0], err[-3000:]
    assert sent.exists()
    (hpc,) = run_dir.glob("hpc_ckpt_*.ckpt")
    assert torch.load(hpc, map_location="cpu", weights_only=True)["global_step"] == step
    assert read_summary(run_dir)["global_step"] == 8


@pytest.mark.slow  # ~10 s; the same Ctrl-C to the group while the ranks import stays in the default suite as
# test_elastic.py's test_ctrl_c_before_training_exits_130_with_one_line_and_leaves_no_run_directory[importing]
def test_ctrl_c_while_ddp_ranks_start_ends_130_at_once_with_every_rank(project):
    """A terminal's Ctrl-C reaches the whole foreground group while the ranks still import. The agent started each
    rank in a session of its own: the job alone gets it and stops them (brisk.run.elastic._CtrlC)."""
    run_dir = project / "run"
    with background_train([*ARGS, *DDP, f"hydra.run.dir={run_dir}"], project) as proc:
        deadline = time.monotonic() + 60
        while len(processes_of(project)) < PROCESSES and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_of(project)) == PROCESSES, "the ranks never started"
        time.sleep(1.5)  # rank 1 still imports torch (~4 s here), under elastic rank 0 too
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
        proc.wait(timeout=60)
        out, err = proc.output()
        deadline = time.monotonic() + 10
        while processes_of(project) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_of(project)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("brisk: interrupted by SIGINT"), err[-3000:]
    assert err.count("brisk: interrupted") == 1
    assert "Traceback" not in err  # Lightning says "Detected KeyboardInterrupt" when it stops the stage: no more
    assert left == [], "a rank outlived the job"
