"""A DDP job's ranks started by TorchElastic's agent (brisk.run.elastic). Real processes, real gloo DDP
on the CPU, real signals to the job process the user started."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest
from optuna.pruners import MedianPruner, PatientPruner, ThresholdPruner
from optuna.trial import TrialState

from background import background_train, checkpoint_step, wait_for_step
from brisk.errors import BriskError
from brisk.run import devices
from brisk.search.report import Trial
from helpers import TINY, compose_cfg, processes_of, read_summary, run_cli, run_dir_of

ELASTIC = ["strategy=ddp", "trainer.devices=2", "callbacks.progress_bar=null"]


def test_ranks_of_several_nodes_are_left_to_torchrun_or_srun(tmp_path):
    """brisk starts the ranks of one node: several nodes of several devices each are refused before anything starts,
    naming trainer.num_nodes (docs/distributed.md: Multi-node); one device per node starts nothing."""
    with pytest.raises(BriskError) as refused:
        devices.ranks_to_start(compose_cfg([*ELASTIC, "trainer.num_nodes=2"], tmp_path))
    assert refused.value.key == "trainer.num_nodes" and "torchrun or srun" in str(refused.value)
    one_each = ["strategy=ddp", "trainer.devices=1", "trainer.num_nodes=2"]
    assert devices.ranks_to_start(compose_cfg(one_each, tmp_path)) == 1
    assert devices.ranks_to_start(compose_cfg(ELASTIC, tmp_path)) == 2


def _started(proc, run_dir: Path, timeout: float = 120) -> None:
    """Wait for the run's first optimizer step (rank 0 writes the record then)."""
    deadline = time.monotonic() + timeout
    while not (run_dir / ".hydra" / "config.yaml").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.output()[1][-3000:]
        time.sleep(0.05)


def _gone(root: Path, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while processes_of(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_of(root)


# SIGTERM to the job alone (`kill <pid>`), or a terminal's Ctrl-C to the job's foreground group: the agent started each
# rank in a session of its own, so the ranks hear of either only from the agent, which forwards it. ctrl_c is slow
# (~20 s): sigterm keeps the forwarding and the one checkpoint in the default suite, and a Ctrl-C to the group is
# forwarded there too (test_ctrl_c_before_training_exits_130_with_one_line_and_leaves_no_run_directory[importing]).
@pytest.mark.parametrize(
    "signum, send",
    [(signal.SIGTERM, os.kill), pytest.param(signal.SIGINT, os.killpg, marks=pytest.mark.slow)],
    ids=["sigterm", "ctrl_c"],
)
def test_a_stop_signal_to_the_job_stops_every_rank_with_one_checkpoint(signum, send, project):
    run_dir = project / "run"
    with background_train([*TINY, *ELASTIC, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"], project) as proc:
        _started(proc, run_dir)
        send(proc.pid, signum)
        proc.wait(timeout=60)
        out, err = proc.output()
        left = _gone(project)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert err.count("brisk: interrupted") == 1 and f"brisk: interrupted by {signum.name} at global step" in err, err[
        -3000:
    ]
    assert [p.name for p in (run_dir / "checkpoints").glob("*.ckpt")] == ["last.ckpt"]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert left == [], "a rank outlived the job"


def test_sigkill_of_the_job_takes_the_ranks(project):
    run_dir = project / "run"
    with background_train([*TINY, *ELASTIC, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"], project) as proc:
        _started(proc, run_dir)
        assert len(processes_of(project)) == 3  # the job and its two ranks
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(project) == [], "a rank outlived the job (PR_SET_PDEATHSIG)"


def test_a_user_error_in_the_ranks_is_one_line_and_leaves_no_run_directory(project):
    # The job builds no callbacks, so the ranks are the first to refuse the monitor.
    bad = ["callbacks=[default,early_stopping]", "callbacks.early_stopping.monitor=nope", "trainer.max_epochs=1"]
    proc = run_cli("train", [*TINY, *ELASTIC, *bad], project, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("brisk: ")]
    assert lines == [lines[0]] and lines[0].startswith("brisk: error: callbacks.early_stopping.monitor='nope'")
    assert not (project / "logs").exists() or not any((project / "logs").rglob("*")), "a refused run left its folder"


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # PatientPruner
def test_a_trial_reaches_the_ranks_as_data_and_names_only_optunas_pruners():
    threshold = {"_target_": "optuna.pruners.ThresholdPruner", "lower": 2.0}
    patient = {"_target_": "optuna.pruners.PatientPruner", "wrapped_pruner": threshold, "patience": 1}
    for spec, cls in (("median", MedianPruner), (threshold, ThresholdPruner), (patient, PatientPruner)):
        back = Trial.from_env(Trial(3, "sqlite:///x.db", "s", spec, False).env())
        assert isinstance(back.pruner, cls) and (back.number, back.study_name, back.storage_given) == (3, "s", False)
    # What a rank cannot build from data alone is refused in the job, naming the key.
    for spec in ({**threshold, "lower": {"_target_": "os.getcwd"}}, {"_target_": "optuna.pruners._threshold.X"}):
        with pytest.raises(BriskError) as e:
            Trial(0, "sqlite:///x.db", "s", spec).env()
        assert e.value.key == "hydra.sweeper.pruner"
    # What the environment names is looked up among optuna.pruners' classes, and nothing else is built.
    for pruner in ({"class": "BasePruner", "args": {}}, {"class": "os.system", "args": {}}, "os.system"):
        text = json.dumps({"number": 0, "storage": "u", "study_name": "s", "pruner": pruner, "storage_given": True})
        with pytest.raises(BriskError, match="BRISK_TRIAL"):
            Trial.from_env(text)


def test_a_search_trial_reports_from_rank_zero_and_is_pruned_through_the_job(project):
    # Two trials, each pruned at its first validation by a threshold no accuracy reaches: rank 0 reports to the study
    # itself (the job hands it the trial), and the job records the trial as pruned, not failed, and goes on.
    url = f"sqlite:///{project / 'optuna.db'}"
    search = ["-m", "hparams_search=optuna", "hydra.sweeper.params=null", "optimizer.lr=choice(0.05,0.1)"]
    sweeper = [
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.pruner={_target_:optuna.pruners.ThresholdPruner,lower:2.0}",
        f"hydra.sweeper.storage={url}",
    ]
    proc = run_cli("train", [*search, *TINY, *ELASTIC, "trainer.max_epochs=2", *sweeper], project, timeout=300)
    trials = optuna.load_study(study_name="brisk", storage=url).get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2, proc.stderr[-3000:]
    assert all(list(t.intermediate_values) == [0] for t in trials), "not reported, or not stopped, at epoch 0"
    assert "Traceback" not in proc.stderr and "failed" not in proc.stderr, proc.stderr[-3000:]
    sweep = Path(proc.stdout.strip().splitlines()[-1])
    table = (sweep / "sweep_summary.csv").read_text()
    assert table.count(",pruned,") == 2 and "TrialPruned: pruned at epoch 0" in table, table


@pytest.mark.slow  # ~45 s on 2 cores: two jobs of three processes each; the search above runs a sweep too
def test_a_sweep_runs_each_job_on_its_own_ranks_in_its_own_run_directory(project):
    proc = run_cli("train", ["-m", "seed=1,2", *TINY, *ELASTIC, "trainer.max_epochs=1"], project, timeout=300)
    sweep = Path(proc.stdout.strip().splitlines()[-1])
    runs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert [p.name for p in runs] == ["0", "1"], proc.stdout[-3000:]
    assert [read_summary(p)["world_size"] for p in runs] == [2, 2]
    assert [read_summary(p)["seed"] for p in runs] == [1, 2]


@pytest.mark.parametrize("when", ["importing", pytest.param("ready", marks=pytest.mark.slow)])  # ready: ~20 s more
def test_ctrl_c_before_training_exits_130_with_one_line_and_leaves_no_run_directory(when, project):
    # importing: the ranks are still importing torch, where a SIGINT would end rank 0 with a KeyboardInterrupt
    # traceback on the console. ready: rank 0 is in brisk's task (brisk.utils.ranks.guard) and says it stopped itself.
    run_dir = project / "run"
    with background_train([*TINY, *ELASTIC, "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"], project) as proc:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if when == "importing" and len(processes_of(project)) == 3:  # the job and its two ranks
                break
            if when == "ready" and (run_dir / "ranks" / "ready").is_file():
                break
            time.sleep(0.02)
        assert proc.poll() is None and time.monotonic() < deadline, f"never {when}: {proc.output()[1][-3000:]}"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        out, err = proc.output()
        left = _gone(project)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("brisk: ")]
    assert len(lines) == 1 and lines[0].startswith("brisk: interrupted by SIGINT"), err[-3000:]
    assert err.strip().splitlines()[-1] == lines[0], err[-3000:]  # last, as test_signals.py's slow variant asks
    assert "no checkpoint written" in lines[0] and "Traceback" not in err, err[-3000:]
    assert not run_dir.exists(), "a run stopped before its first step left its folder"
    assert left == [], "a rank outlived the job"


@pytest.mark.slow  # ~60 s on 2 cores: a stopped job and its resume, three processes each
def test_a_job_stopped_by_sigterm_resumes_on_its_ranks_and_trains_on_from_its_checkpoint(project):
    # 8 optimizer steps per epoch (1200 - 400 images, batches of 100 over 2 ranks); stopped once epoch 0 is saved.
    run_dir = project / "run"
    args = [*TINY, *ELASTIC, "data.synthetic.n_train=1200", "data.val_size=400", "trainer.max_epochs=3"]
    args += [f"hydra.run.dir={run_dir}"]
    last = run_dir / "checkpoints" / "last.ckpt"
    with background_train(args, project) as proc:
        wait_for_step(proc, last, 8)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        err = proc.output()[1]
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    stopped = checkpoint_step(last)
    assert 8 <= stopped < 24 and f"brisk: interrupted by SIGTERM at global step {stopped} " in err, err[-3000:]
    assert not (run_dir / "summary.json").exists()

    resumed = run_cli("train", [*args, "ckpt_path=last"], project)
    assert f"Restoring states from the checkpoint path at {last}" in resumed.stdout + resumed.stderr
    assert run_dir_of(resumed) == run_dir
    s = read_summary(run_dir)
    assert (s["global_step"], s["world_size"]) == (24, 2)
    assert s["distributed"]["cluster_environment"] == "TorchElasticEnvironment"
    assert (run_dir / ".hydra" / "resume-1" / "config.yaml").is_file()  # the resume's own record beside the first
    # The resumed job trained on from the saved step: what it logged (its own csv version) starts after it.
    with open(run_dir / "csv" / "version_1" / "metrics.csv") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps and min(steps) >= stopped, (stopped, steps)


def test_a_finished_process_leaves_its_process_group_while_python_still_runs(tmp_path):
    """Every entry point calls brisk.utils.ranks.leave_process_group once its task is done: left to the interpreter's
    end, gloo's threads can abort a finished rank (SIGABRT, exit -6). A real gloo group of one process."""
    import torch.distributed as dist

    from brisk.utils import ranks

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    ranks.leave_process_group()
    assert not dist.is_initialized()
    ranks.leave_process_group()  # none left: nothing to do
