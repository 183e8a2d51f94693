"""The search: ask Optuna for a batch of trials, launch them as Hydra jobs, tell Optuna how each ended.

Trial N runs as Hydra job number N (its directory is <sweep dir>/N), which is how the trial's own
process finds its trial (brisk.search.report). A search killed at any point resumes with the same
command: trials that ended stay as they are, and trials it left running are failed and asked again.
Several searches may share one study at once; brisk.search.trials tells their trials apart.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import OmegaConf

from brisk.errors import BriskError
from brisk.search import results, space, trials
from brisk.search import storage as storages
from brisk.search import study as studies
from brisk.search.sweep import conclude, outcome
from brisk.utils.files import write_text

log = logging.getLogger("brisk")
# Seconds between looks at a study whose last trials other searches are running.
WAIT = 2


def search(sweeper, arguments: list[str]) -> list[Any]:
    """Run `hydra.sweeper.n_trials` trials in the study (counting those a previous run finished, and those
    other searches of the same study run now)."""
    from optuna.trial import TrialState

    # A namespace, not a DictConfig: Hydra has already instantiated a sampler or pruner given with a `_target_`.
    settings, config = SimpleNamespace(**sweeper.settings), sweeper.config
    for key in ("n_trials", "n_jobs", "max_failures"):
        if not isinstance(getattr(settings, key), int) or getattr(settings, key) < 1:
            raise BriskError(f"hydra.sweeper.{key}={getattr(settings, key)} must be a whole number >= 1.")
    sweep_dir = Path(config.hydra.sweep.dir)
    params = OmegaConf.to_container(settings.params, resolve=True) if settings.params is not None else {}
    trial_space = space.parse(params, arguments)
    url = storages.url_of(settings.storage, sweep_dir)
    study, storage = studies.create(settings, url, trial_space.grid)
    # Every check has passed: only now does the search write its sweep directory (a refused one leaves none).
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(config))
    before = trials.finished(study.get_trials(deepcopy=False))
    log.info("study %s in %s: %d of %d trials done", settings.study_name, url, before, settings.n_trials)

    returns, failures, waiting = [], 0, False
    while True:
        batch, others = next_batch(study, url, trial_space.distributions, settings.n_trials, settings.n_jobs)
        if not batch and others:  # the budget is taken: stay until those trials end, or their search is gone
            if not waiting:
                log.info("waiting for %d trials that other searches of this study are running", others)
            waiting = True
            time.sleep(WAIT)
            continue
        if not batch:
            break
        waiting = False
        with trials.claimed(storage, study, batch):
            for trial, ret in _launch(sweeper, trial_space, batch):
                trials.record_run(trial, ret)
                state = _tell(study, trial.number, ret)
                returns.append(ret)
                failures += state == TrialState.FAIL
        if failures >= settings.max_failures:
            results.write(study, trial_space, config, url)
            # the runs that finished, compared (the earlier sweep folders' too); the sweep folder
            conclude(sweep_dir, exit_on_failure=False, runs=results.run_dirs(sweep_dir))
            raise BriskError(
                f"the search stopped: {failures} trials failed (hydra.sweeper.max_failures={settings.max_failures}). "
                f"Their errors are in {sweep_dir / 'sweep_summary.csv'}; fix the cause or raise the cap, then run the "
                "same command with the same storage and study name to resume."
            )
        if hasattr(study.sampler, "is_exhausted") and study.sampler.is_exhausted(study):
            log.info("every point of the grid has been tried")
            break
    if trials.finished(study.get_trials(deepcopy=False)) == before:
        log.info("nothing to do: raise hydra.sweeper.n_trials (now %d) to search further", settings.n_trials)
    results.write(study, trial_space, config, url)
    return returns


def next_batch(study, url: str, distributions: dict, n_trials: int, n_jobs: int) -> tuple[list, int]:
    """The trials to run next, and how many other searches of the study run now. Recovering (between batches too:
    a search that shares the study may have been killed), counting and asking are one step under the SQLite
    storage's lock, so two searches that look at once cannot both ask the budget's last trials. Other databases
    have no such lock: there each search may run one batch beyond n_trials."""
    with storages.locked(url):
        listed = trials.recover(study)
        others = trials.running(listed)
        left = n_trials - trials.finished(listed) - others
        with trials.quiet():
            return [study.ask(distributions) for _ in range(min(n_jobs, left))], others


def _launch(sweeper, trial_space, batch) -> list[tuple[Any, Any]]:
    """Launch the batch; each launch call takes consecutive job numbers, so a gap in trial numbers (another
    process asked in between) splits the batch. A trial whose overrides do not compose is not launched."""
    launched, runnable = [], []
    for trial in batch:
        overrides = trial_space.overrides(trial.params)
        try:
            sweeper.validate_batch_is_legal([overrides])
            runnable.append((trial, overrides))
        except Exception as e:  # Hydra's compose errors: an unknown option or key in this trial's values
            launched.append((trial, e))
    runs: list[list] = []
    for trial, overrides in runnable:
        if runs and runs[-1][-1][0].number + 1 == trial.number:
            runs[-1].append((trial, overrides))
        else:
            runs.append([(trial, overrides)])
    for run in runs:
        rets = sweeper.launcher.launch([o for _, o in run], initial_job_idx=run[0][0].number)
        launched += [(trial, ret) for (trial, _), ret in zip(run, rets, strict=True)]
    return sorted(launched, key=lambda pair: pair[0].number)


def _tell(study, number: int, ret):
    """Record how the job ended; returns the trial's state."""
    from optuna.trial import TrialState

    if isinstance(ret, Exception):
        status, value, error = "failed", None, f"{type(ret).__name__}: {ret}"
    else:
        status, value, error = outcome(ret)
    if status == "completed" and (not isinstance(value, int | float) or not math.isfinite(value)):
        status, error = "failed", f"the job returned {value!r}, not a number (is optimized_metric logged?)"
    # skip_if_finished: another search may have failed a trial it took for abandoned; that is no crash here.
    if status == "completed":
        study.tell(number, float(value), skip_if_finished=True)
        log.info("trial %d: %s", number, value)
        return TrialState.COMPLETE
    if status == "pruned":
        study.tell(number, state=TrialState.PRUNED, skip_if_finished=True)
        log.info("trial %d: pruned (%s)", number, error)
        return TrialState.PRUNED
    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    log.warning("trial %d failed: %s", number, error)
    return TrialState.FAIL
