"""DDP under brisk-train: single runs, sweeps, torchrun, simulated multi-node, SLURM detection.

All real multi-process DDP over gloo on the CPU. Every test checks that no process it started is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from lightning.fabric.plugins.environments.lightning import find_free_network_port

from brisk.cli import CONFIG_PATH
from helpers import SLURM_ENV, TINY, brisk_train, main_in_process, read_summary, run_cli, run_dir_of

DDP = ["strategy=ddp", "trainer.devices=2", "trainer.max_epochs=1", "callbacks.progress_bar=null"]


@pytest.fixture
def root(project: Path) -> Path:
    return project


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "logs").rglob(".hydra"))


def test_single_run_has_one_directory_and_global_metrics(ddp_run, tmp_path):
    # The session's 2-rank run, shared with test_equivalence.py: EXACT_DDP, TINY with BatchNorm and augmentation off,
    # which nothing here depends on (the sweep and torchrun runs below train with both).
    run_dir, proc, root = ddp_run
    assert run_dirs(root) == [run_dir]
    # brisk.utils.quiet, in every rank: Lightning's sync_dist advice for val/acc_best and its tips; rank 1's log
    # lines go to its own file only, so the console says the precision once
    console = proc.stdout + proc.stderr
    assert "sync_dist=True" not in console and "Tip:" not in console and console.count("] - precision: ") == 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best-epoch000.ckpt", "last.ckpt"]
    assert (run_dir / ".hydra" / "config.yaml").is_file()  # rank 0 wrote the record; rank 0's last line is the folder
    s = read_summary(run_dir)
    assert s["world_size"] == 2 and s["per_device_batch"] == 50 and s["global_batch"] == 100
    # TorchElastic's agent started the ranks, and rank 1's lines are in its file there
    assert s["distributed"]["cluster_environment"] == "TorchElasticEnvironment"
    (rank1,) = run_dir.glob("ranks/*/attempt_0/1/stderr.log")
    assert "Initializing distributed: GLOBAL_RANK: 1" in rank1.read_text(), "rank 1 logs in the same directory"
    # Global metrics: the test accuracy logged by the 2-rank run is the one a single process computes
    # on the whole test split with the same checkpoint (each rank tested half of it). That process is this one:
    # the one-process metrics need no process of their own, and a start costs ~7 s of importing on 2 cores.
    data, eval_dir = [o for o in TINY if o.startswith("data")], tmp_path / "eval"
    single = [*data, f"ckpt_path={s['ckpt_path']}", "trainer.accelerator=cpu", f"hydra.run.dir={eval_dir}"]
    assert main_in_process("evaluate", single, root) == 0
    single_eval = json.loads((eval_dir / "eval.json").read_text())
    assert s["metrics"]["test/acc"] == pytest.approx(single_eval["metrics"]["test/acc"], abs=1e-6)
    # The per-class counts too: the ranks' confusion matrices are gathered, not rank 0's alone.
    assert s["test_confusion_matrix"] == single_eval["test_confusion_matrix"]
    assert s["metrics"]["test/top5_acc"] == pytest.approx(single_eval["metrics"]["test/top5_acc"], abs=1e-6)


@pytest.mark.slow  # ~40 s: a run, and an eval of it on one process and on two ranks
def test_eval_on_two_ranks_gives_the_one_process_metrics(root):
    """brisk-eval with strategy=ddp: TorchElastic's agent starts its ranks, each tests its share, and
    eval.json holds the metrics gathered over all of them, as one process computes them."""
    run_dir = run_dir_of(run_cli("train", [*TINY, "trainer.max_epochs=1"], root))
    data, ckpt = [o for o in TINY if o.startswith("data")], f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    evals = [run_dir_of(run_cli("evaluate", [*data, ckpt, *ddp], root)) for ddp in ([], DDP[:2])]
    one, two = (json.loads((d / "eval.json").read_text()) for d in evals)
    assert two["metrics"] == pytest.approx(one["metrics"], abs=1e-6) and one["metrics"]["test/acc"] > 0
    assert two["test_confusion_matrix"] == one["test_confusion_matrix"]
    (rank1,) = evals[1].glob("ranks/*/attempt_0/1/stderr.log")
    assert "GLOBAL_RANK: 1" in rank1.read_text()


def rank1_logged(run_dir: Path) -> bool:
    """Rank 1 wrote its log lines into its job's run directory, in the agent's files."""
    return any("GLOBAL_RANK: 1" in f.read_text() for f in run_dir.glob("ranks/*/attempt_0/1/stderr.log"))


def test_sweep_runs_each_job_once_with_its_ranks(root):
    proc = run_cli("train", ["-m", *TINY, *DDP, "optimizer.lr=0.01,0.02"], root)
    dirs = run_dirs(root)
    assert len(dirs) == 2 and {d.name for d in dirs} == {"0", "1"} and dirs[0].parent == dirs[1].parent
    assert not (root / "logs" / "train" / "runs").exists(), "a rank ran as a separate run"
    lrs = []
    for d in dirs:
        s = read_summary(d)
        assert s["world_size"] == 2 and s["distributed"]["cluster_environment"] == "TorchElasticEnvironment"
        lrs.append(next(o for o in s["overrides"] if o.startswith("optimizer.lr")))
        assert rank1_logged(d)
    assert lrs == ["optimizer.lr=0.01", "optimizer.lr=0.02"]
    assert proc.stdout.count("Launching 2 jobs locally") == 1, "the sweep ran more than once"


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_ddp_spawn_in_a_sweep(root):
    spawn = ["strategy=ddp_spawn", *DDP[1:]]
    run_cli("train", ["-m", *TINY, *spawn, "optimizer.lr=0.01,0.02"], root)
    dirs = run_dirs(root)
    assert len(dirs) == 2 and all(read_summary(d)["world_size"] == 2 for d in dirs)


def _torchrun(root: Path, args: list[str], *extra: str) -> subprocess.Popen:
    env = {**os.environ, "BRISK_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", *extra, "-m", "brisk.train", *TINY, *args]
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 180) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, out[-4000:]
    return out


def test_torchrun_ranks_share_one_run_directory(root):
    out = _finish(_torchrun(root, DDP, "--nproc_per_node=2"))
    (run_dir,) = run_dirs(root)
    assert str(run_dir) in out
    assert read_summary(run_dir)["world_size"] == 2
    assert read_summary(run_dir)["distributed"]["cluster_environment"] == "TorchElasticEnvironment"
    assert sorted(p.name for p in run_dir.glob("*.log")) == ["train.log"], "both ranks log into the same folder"


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_two_nodes_on_one_machine(root):
    """Two torchrun invocations, one process each, rendezvous on 127.0.0.1: world size 2."""
    port = str(find_free_network_port())
    run_dir = root / "logs" / "two-nodes"
    args = [*DDP[:1], "trainer.devices=1", "trainer.num_nodes=2", *DDP[2:], f"hydra.run.dir={run_dir}"]
    common = ["--nnodes=2", "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}"]
    nodes = [_torchrun(root, args, *common, f"--node_rank={rank}") for rank in (0, 1)]
    outs = [_finish(p) for p in nodes]
    s = read_summary(run_dir)
    assert s["world_size"] == 2 and s["distributed"]["num_nodes"] == 2
    assert str(run_dir) in outs[0]


@pytest.mark.usefixtures("restore_logging")
def test_slurm_job_is_detected_and_a_requeue_resumes(root, capsys, monkeypatch):
    # In this process: what SLURM gives a job is its environment, not a process of brisk's (the signals that reach
    # SLURM jobs are tested as real processes in test_signals.py and test_resume.py).
    for key, value in SLURM_ENV.items():
        monkeypatch.setenv(key, value)
    args = [*TINY, "scheduler=none", "callbacks.progress_bar=null"]
    proc = brisk_train([*args, "trainer.max_epochs=1"], root, capsys, monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = run_dir_of(proc)
    assert first == (root / "logs" / "train" / "runs" / "slurm-4242").resolve()
    s = read_summary(first)
    assert s["distributed"]["cluster_environment"] == "SLURMEnvironment"
    # The requeued job has the same id, finds its directory and resumes from last.ckpt.
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    proc = brisk_train([*args, "trainer.max_epochs=2"], root, capsys, monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir_of(proc) == first
    assert read_summary(first)["global_step"] == 2 * 15
    assert "resuming from" in proc.stdout + proc.stderr


def test_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["hydra/launcher=slurm", "trainer.devices=4", "trainer.num_nodes=2"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.tasks_per_node, launcher.gpus_per_node, launcher.nodes) == (4, 4, 2)


def test_sbatch_script_is_valid_bash():
    script = Path(__file__).parents[2] / "scripts" / "slurm" / "train.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "srun" in text and "--signal=SIGUSR1@" in text and "--requeue" in text
