"""What a search leaves in its sweep directory: optimization_results.yaml, optimization_plot.png, and the
best trial printed as a ready-to-paste override line. All of them cover the whole study, resumes included; so does
the runs' comparison (brisk.search.sweep), which finds each trial's run folder in optimization_results.yaml.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from brisk.search.trials import RUN_DIR
from brisk.utils import run_files
from brisk.utils.files import published, write_text

log = logging.getLogger("brisk")


def write(study, trial_space, config: DictConfig, url: str) -> None:
    from optuna.trial import TrialState

    sweep_dir = Path(config.hydra.sweep.dir)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value if study.direction.name == "MAXIMIZE" else -t.value, default=None)
    summary = {
        "study_name": study.study_name,
        "storage": url,
        "direction": study.direction.name.lower(),
        "metric": config.get("optimized_metric"),
        "counts": dict(Counter(t.state.name for t in trials)),
        "best": None,
        "trials": [
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "params": dict(t.params),
                "run_dir": t.user_attrs.get(RUN_DIR),  # None: not launched, or launched before brisk recorded it
            }
            for t in trials
        ],
    }
    if best is not None:
        line = trial_space.best_line(best.params)
        summary["best"] = {"number": best.number, "value": best.value, "params": dict(best.params), "overrides": line}
    write_text(sweep_dir / "optimization_results.yaml", OmegaConf.to_yaml(OmegaConf.create(summary)))
    plot(study, trials, sweep_dir / "optimization_plot.png", summary["metric"])
    counts = ", ".join(f"{n} {s.lower()}" for s, n in summary["counts"].items())
    print(f"study {study.study_name}: {len(trials)} trials ({counts}), in {url}", flush=True)
    if best is None:
        print("no trial completed, so there is no best trial yet", flush=True)
    else:
        print(f"best trial {best.number}: {summary['metric']}={best.value:.6g}. Its overrides:", flush=True)
        print(summary["best"]["overrides"], flush=True)
    # The sweep directory is printed last by the sweep's end (brisk.search.sweep.conclude), after the comparison.


def run_dirs(sweep_dir: Path) -> list[Path] | None:
    """The run folders of every trial of the study, in trial order, as optimization_results.yaml records them (this
    sweep folder's, and those of the earlier searches a resumed study ran). None where it records none (the file is
    missing, or the study was made before brisk recorded run folders): then the sweep folder's own runs are compared."""
    path = Path(sweep_dir) / "optimization_results.yaml"
    if not path.is_file():
        return None
    loaded = run_files.load_yaml(path, "a search's results")  # data: no aliases, no ${...}, bounded
    listed = loaded.get("trials") if isinstance(loaded, dict) else None
    dirs = [t["run_dir"] for t in listed or [] if isinstance(t, dict) and isinstance(t.get("run_dir"), str)]
    return [Path(d) for d in dirs] or None


def importances(study) -> dict[str, float]:
    """Optuna's parameter importances (PED-ANOVA by default in optuna 5; needs no scikit-learn), or {} while
    there are too few completed trials to tell parameters apart (Optuna then warns and returns equal values)."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            values = optuna.importance.get_param_importances(study)
        except (ValueError, RuntimeError) as e:
            log.info("no parameter importances yet: %s", e)
            return {}
    return values if len(set(values.values())) > 1 else {}


def plot(study, trials, path: Path, metric: str) -> None:
    """History (each trial's value and the best so far) beside the parameter importances."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.info("%s skipped: matplotlib is not installed (pip install -e '.[plots]')", path.name)
        return
    from optuna.trial import TrialState

    fig = Figure(figsize=(10, 3.6), layout="constrained")
    history, bars = fig.subplots(1, 2, width_ratios=[3, 2])
    maximize = study.direction.name == "MAXIMIZE"
    styles = {TrialState.COMPLETE: ("o", "#2a7"), TrialState.PRUNED: ("v", "#999")}
    for state, (marker, color) in styles.items():
        # A pruned trial is drawn at its last reported value.
        shown = [(t.number, t.value if t.value is not None else _last(t)) for t in trials if t.state == state]
        shown = [(n, v) for n, v in shown if v is not None]
        if shown:
            history.scatter(*zip(*shown, strict=True), marker=marker, color=color, label=state.name.lower())
    failed = [t.number for t in trials if t.state == TrialState.FAIL]
    for n in failed:
        history.axvline(n, color="#c33", alpha=0.25, linewidth=1)
    complete = sorted((t.number, t.value) for t in trials if t.state == TrialState.COMPLETE)
    if complete:
        best, running = [], None
        for _, v in complete:
            running = v if running is None else (max if maximize else min)(running, v)
            best.append(running)
        history.step([n for n, _ in complete], best, where="post", color="#36c", label="best so far")
    history.xaxis.get_major_locator().set_params(integer=True)
    history.set_xlabel(f"trial (red lines: {len(failed)} failed)")
    history.set_ylabel(metric)
    history.set_title(f"{metric} by trial", fontsize=9)
    if history.get_legend_handles_labels()[0]:
        history.legend(fontsize=8)
    values = importances(study)
    if values:
        names = list(values)[::-1]
        bars.barh(range(len(names)), [values[n] for n in names], color="#2a7")
        bars.set_yticks(range(len(names)), names, fontsize=8)
        bars.set_xlabel("importance")
        bars.set_ylabel("parameter")
        bars.set_title("parameter importance", fontsize=9)
    else:
        bars.text(0.5, 0.5, "importances need more\ncompleted trials", ha="center", va="center")
        bars.set_axis_off()
    fig.suptitle(f"study {study.study_name}: {len(trials)} trials", fontsize=10)
    with published(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def _last(trial) -> float | None:
    steps = trial.intermediate_values
    return steps[max(steps)] if steps else None
