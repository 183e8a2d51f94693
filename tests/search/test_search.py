"""hparams_search=optuna: a real SQLite study that resumes after SIGKILL, pruning, failures, DDP trials.

Every search here runs brisk-train -m in a subprocess with brisk's own sweeper, and the study is read
back from its SQLite file with Optuna, as a user would inspect it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from brisk.errors import BriskError
from brisk.search import space
from brisk.search import storage as storages
from brisk.search import trials as trials_
from helpers import TINY, brisk_main, run_cli

SEARCH = ["-m", "hparams_search=optuna", *TINY, "callbacks.progress_bar=null", "hydra.sweeper.params=null"]
PNG = b"\x89PNG\r\n\x1a\n"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def load(storage, name: str = "brisk"):
    return optuna.load_study(study_name=name, storage=storage)


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


def sweep_dir_of(proc) -> Path:
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.usefixtures("restore_logging")
def test_killed_search_resumes_without_rerunning_finished_trials(project, capsys, monkeypatch):
    url = f"sqlite:///{project / 'optuna.db'}"
    args = [
        *SEARCH,
        "trainer.max_epochs=1",
        "optimizer.lr=tag(log,interval(0.01,0.1))",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.pruner=none",
        f"hydra.sweeper.storage={url}",
    ]
    env = {**os.environ, "BRISK_ROOT": str(project), "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(
        [sys.executable, "-m", "brisk.train", *args],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # kill the sweep while its second trial trains, after the first has finished
        deadline = time.monotonic() + 240
        storage = None
        while time.monotonic() < deadline and first.poll() is None:
            if storage is None and (project / "optuna.db").is_file():
                # As the sweeper opens it, under the folder's lock: the sweeper may still be creating the tables.
                storage = storages.open_checked(url)
            if storage is not None and storage.get_all_studies():
                trials = load(storage).get_trials(deepcopy=False)
                # a running trial with its parameters drawn and its owner marked: killed between the ask and the
                # draw (seen on a busy machine), it would hold none to retry; killed before the mark, the resume
                # judges it by its age and waits out trials.GRACE (132 s in one full-suite run, 16 s otherwise)
                if any(t.state == TrialState.COMPLETE for t in trials) and any(
                    t.state == TrialState.RUNNING and t.params and trials_.OWNER in t.user_attrs for t in trials
                ):
                    break
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
    before = load(url).get_trials()
    running = [t for t in before if t.state == TrialState.RUNNING]
    assert len(running) == 1, f"the kill did not land inside a trial: {[t.state for t in before]}"
    done = {t.number: t.value for t in before if t.state == TrialState.COMPLETE}

    # The same command, resumed in this process: only the killed search needs a process of its own, and the resume
    # judges the killed one's trials by its pid, which is not this one (the test: 56.6 s -> 45.6 s alone).
    proc = brisk_main("train", args, project, capsys, monkeypatch)
    assert proc.returncode == 0, proc.stderr[-5000:]
    after = load(url).get_trials()
    assert {t.number: t.value for t in after if t.number in done} == done, "finished trials changed"
    assert after[running[0].number].state == TrialState.FAIL
    (retry,) = [t for t in after if t.user_attrs.get("brisk_retry_of") == running[0].number]
    assert retry.state == TrialState.COMPLETE and retry.params == running[0].params
    assert [t.state for t in after].count(TrialState.COMPLETE) == 3 and len(after) == 4
    sweep = sweep_dir_of(proc)
    ran = sorted(int(p.name) for p in sweep.iterdir() if p.is_dir())
    assert ran == sorted(t.number for t in after if t.number not in done and t.state == TrialState.COMPLETE)
    # The resumed search wrote a new sweep folder, and its comparison still holds every finished trial of the study:
    # those that finished before the kill are found in the killed search's folder, by the run folder each trial
    # records in the study.
    earlier = {n: Path(after[n].user_attrs["brisk_run_dir"]) for n in done}
    assert all(d.is_dir() and d.parent != sweep for d in earlier.values())
    compared = (sweep / "comparison.md").read_text()
    assert compared.startswith(f"# 3 runs in {sweep}, {len(done)} of them in earlier sweep folders of the study")
    assert all(f"| ../{d.parent.name}/{n} |" in compared for n, d in earlier.items()), compared
    assert (sweep / "comparison.csv").read_text().count("\n") == 1 + 3

    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    best = max((t for t in after if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert results["best"]["number"] == best.number and results["counts"] == {"COMPLETE": 3, "FAIL": 1}
    lines = proc.stdout.strip().splitlines()
    line = lines[next(i for i, x in enumerate(lines) if x.endswith("Its overrides:")) + 1]
    assert lines[-4:-1] == [str(sweep / name) for name in ("comparison.csv", "comparison.md", "comparison.png")]
    assert line == results["best"]["overrides"] and re.search(r"optimizer\.lr=0\.0\d+", line)
    assert "hparams_search" not in line and "data=synthetic" in line
    assert is_png(sweep / "optimization_plot.png") and is_png(sweep / "sweep_plot.png")


# In this process: the sweeper launches its trials in the process that runs it anyway (20.8 s -> 15.0 s alone).
@pytest.mark.usefixtures("restore_logging")
def test_pruned_and_failed_trials_do_not_stop_the_search(project, capsys, monkeypatch):
    # A grid over two learning rates: -1 fails the config check, 0.05 is pruned by a threshold no accuracy reaches.
    proc = brisk_main(
        "train",
        [
            *SEARCH,
            "trainer.max_epochs=2",
            "optimizer.lr=choice(0.05,-1.0)",
            "hydra.sweeper.sampler=grid",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.pruner={_target_:optuna.pruners.ThresholdPruner,lower:2.0}",
        ],
        project,
        capsys,
        monkeypatch,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    sweep = sweep_dir_of(proc)
    trials = {t.params["optimizer.lr"]: t for t in load(f"sqlite:///{sweep / 'optuna.db'}").get_trials()}
    assert trials[-1.0].state == TrialState.FAIL
    pruned = trials[0.05]
    assert pruned.state == TrialState.PRUNED and list(pruned.intermediate_values) == [0], "not stopped at epoch 0"
    trial_dir = sweep / str(pruned.number)
    assert not (trial_dir / "summary.json").exists() and not list(trial_dir.rglob("best-epoch001.ckpt"))
    table = (sweep / "sweep_summary.csv").read_text()
    assert ",pruned," in table and ",failed," in table and "TrialPruned" in table
    assert "no trial completed" in proc.stdout


@pytest.mark.slow  # ~12 s of CPU, mostly start-up: over the default suite's budget for this file
def test_the_search_stops_at_max_failures(project):
    proc = run_cli(
        "train",
        [*SEARCH, "optimizer.lr=choice(-1.0,-2.0)", "hydra.sweeper.n_trials=10", "hydra.sweeper.max_failures=2"],
        project,
        check=False,
    )
    assert proc.returncode == 2 and "brisk: error: the search stopped: 2 trials failed" in proc.stderr
    (db,) = (project / "logs").rglob("optuna.db")
    assert [t.state for t in load(f"sqlite:///{db}").get_trials()] == [TrialState.FAIL] * 2
    assert (db.parent / "optimization_results.yaml").is_file()


@pytest.mark.slow
def test_ddp_trial_is_pruned_on_all_ranks_and_only_rank_zero_reports(project):
    proc = run_cli(
        "train",
        [
            *SEARCH,
            "strategy=ddp",
            "trainer.devices=2",
            "trainer.max_epochs=2",
            "optimizer.lr=interval(0.01,0.1)",
            "hydra.sweeper.n_trials=1",
            "hydra.sweeper.pruner={_target_:optuna.pruners.ThresholdPruner,lower:2.0}",
        ],
        project,
    )
    sweep = sweep_dir_of(proc)
    (trial,) = load(f"sqlite:///{sweep / 'optuna.db'}").get_trials()
    assert trial.state == TrialState.PRUNED and list(trial.intermediate_values) == [0]
    assert "trial 0, epoch 0: val/acc_best" in (sweep / "0" / "train.log").read_text()
    (rank1,) = (sweep / "0").glob("ranks/*/attempt_0/1/stderr.log")  # rank 1's lines (TorchElastic's file)
    rank1 = rank1.read_text()
    assert "reported" not in rank1 and rank1, "rank 1 ran, and did not talk to the study"


def test_search_space_from_hydra_sweep_syntax():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    s = space.parse(
        {"optimizer.lr": "tag(log, interval(1e-4, 0.1))", "data.batch_size": "choice(128, 256)", "x": "range(1, 8, 2)"},
        ["hparams_search=optuna", "data=synthetic", "data.batch_size=64"],  # the command line fixes batch_size
    )
    assert s.distributions == {
        "optimizer.lr": FloatDistribution(1e-4, 0.1, log=True),
        "x": IntDistribution(1, 7, step=2),
    }
    assert s.fixed == ["hparams_search=optuna", "data=synthetic", "data.batch_size=64"]
    params = {"optimizer.lr": 0.0123456789, "x": 3}
    assert s.overrides(params)[-2:] == ["optimizer.lr=0.0123456789", "x=3"]
    assert s.best_line(params) == "data=synthetic data.batch_size=64 optimizer.lr=0.0123457 x=3"
    grid = space.parse(None, ["model=choice(a,b)", "y=range(0.5,1.5,0.5)"])
    assert grid.distributions["model"] == CategoricalDistribution(["a", "b"])
    assert grid.grid() == {"model": ["a", "b"], "y": [0.5, 1.0]}
    bad_spaces = (["a=interval(1,0)"], ["a=tag(log,interval(0,1))"], ["a=tag(log,range(0,10))"], ["a=range(3,1)"])
    for bad in (*bad_spaces, ["a=1"], ["a=choice(1"]):
        with pytest.raises(BriskError):
            space.parse(None, bad)
