"""Every use of a private Lightning or Hydra API, in one place.

Checked on lightning 2.6.6 and hydra-core 1.3.8 (pyproject pins lightning <2.7 and hydra-core <1.4).
Each entry says why no public API does the job. `missing()` lists the names that have gone, and
tests/project/test_compat.py fails with that list, so a version bump that breaks one is caught at once
rather than deep inside a run.
"""

from __future__ import annotations

import re
from typing import Any

import lightning as L
from hydra.core.utils import JobReturn
from hydra.errors import ConfigCompositionException, InstantiationException
from lightning.pytorch.callbacks import ModelCheckpoint, StochasticWeightAveraging, WeightAveraging
from lightning.pytorch.loops import _FitLoop
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector
from torch import nn

CHECKED_ON = {"lightning": "2.6.6", "hydra-core": "1.3.8"}


def cluster_environment(trainer: L.Trainer) -> Any:
    """The environment Lightning's signal connector consults. Single-device strategies have no public
    `cluster_environment`; the Trainer's connector always has one."""
    return trainer._accelerator_connector.cluster_environment


def hpc_save_path(trainer: L.Trainer) -> str:
    """The next hpc_ckpt_N.ckpt, the file a requeued SLURM job resumes from by itself. Lightning computes
    the name only in its checkpoint connector."""
    return trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)


def apply_pending_loader_state(trainer: L.Trainer) -> None:
    """Apply the train loader's saved position if Lightning left it pending (see brisk.callbacks.resume_state).

    Lightning restores it only when it builds the loader after loading the loop state; there is no
    public call to apply it later.
    """
    loop = trainer.fit_loop
    if loop._combined_loader_states_to_load:
        loop._load_combined_loader_states()


def save_now(callback: ModelCheckpoint, trainer: L.Trainer) -> None:
    """What ModelCheckpoint does at its own every_n_train_steps: its top-k and its last file, unless it already
    saved at this step. The public hooks only save on Lightning's own schedule (see LastCheckpoint)."""
    if callback._should_skip_saving_checkpoint(trainer):
        return
    candidates = callback._monitor_candidates(trainer)
    callback._save_topk_checkpoint(trainer, candidates)
    callback._save_last_checkpoint(trainer, candidates)


def job_error(job_return: JobReturn) -> BaseException | Any:
    """The exception a failed Hydra job raised. The public `return_value` re-raises it and writes a line to
    stderr, which would print every failure twice in a sweep."""
    return job_return._return_value


def averaged_module(callback: L.Callback) -> nn.Module | None:
    """The model copy a weight-averaging callback keeps, or None for other callbacks (or before fit's setup).

    WeightAveraging (EMA) keeps an AveragedModel in `_average_model` (the copy is its `.module`);
    StochasticWeightAveraging keeps a deep copy of the LightningModule there. Neither exposes it publicly, and
    brisk's pruning must give the copy the same masks (see brisk.callbacks.pruning).
    """
    if isinstance(callback, WeightAveraging):
        average = callback._average_model
        return None if average is None else average.module
    if isinstance(callback, StochasticWeightAveraging):
        return callback._average_model
    return None


def stop_like_sigterm(trainer: L.Trainer) -> None:
    """Make Lightning stop as if its own SIGTERM handler had run: it raises SIGTERMException at its next
    check (the end of the batch, of the epoch, or the next evaluation batch). `Trainer.received_sigterm`
    is a read-only property and `should_stop` ends training as a success, so there is no public way.
    brisk sets it itself because Lightning's handler broadcasts from inside the signal handler, which
    hangs DDP when only rank 0 got the signal (see brisk.callbacks.sigterm_checkpoint)."""
    trainer._signal_connector.received_sigterm = True


def slurm_requeue(trainer: L.Trainer, signum: int) -> None:
    """What Lightning's SLURM handler does on the requeue signal (SIGUSR1): finalize the loggers, save
    hpc_ckpt_N.ckpt (a collective under DDP: `save_checkpoint` ends in a barrier) and, on rank 0, `scontrol
    requeue` the job. Lightning runs it inside the signal handler, which hangs DDP when the ranks are not all
    in it at once; brisk calls it on every rank at a batch end they agreed on (brisk.callbacks.sigterm_checkpoint)."""
    trainer._signal_connector._slurm_sigusr_handler_fn(signum, None)


# Hydra's messages: "Error in call to target 'a.b.C':", "Error locating target 'a.b.C', ...", "Error in creating
# partial(a.b.C, ...) object:", each with a last line "full_key: <key>" when the node has one.
_HYDRA_TARGET = re.compile(
    r"Error (?:in call to target '([\w.]+)'|locating target '([\w.]+)'|in creating partial\(([\w.]+),)"
)
_HYDRA_FULL_KEY = re.compile(r"^full_key: (\S+)$", re.MULTILINE)
_HYDRA_AMBIGUOUS = re.compile(r"^Ambiguous value for argument '(.+)'$", re.MULTILINE)


def instantiation_site(error: InstantiationException) -> tuple[str | None, str | None]:
    """(target, full_key) of the call an InstantiationException wraps: the dotted name of the class or function
    (by its defining module), and the config key of the node where Hydra knows it (not for a node a constructor
    instantiates itself, such as the classifier's net). Hydra writes both only into the message."""
    text = str(error)
    target = _HYDRA_TARGET.match(text)
    full_key = _HYDRA_FULL_KEY.search(text)
    return (next(filter(None, target.groups())) if target else None), (full_key[1] if full_key else None)


def ambiguous_override(error: ConfigCompositionException) -> str | None:
    """The override Hydra refused in run mode because a comma made it a sweep (`data.root=/a,b`): the exception
    carries it only in its message."""
    found = _HYDRA_AMBIGUOUS.search(str(error))
    return found[1] if found else None


def stopped_for_ctrl_c(exit: SystemExit) -> bool:
    """Whether this is how Lightning ended a Trainer stage on a KeyboardInterrupt: it runs the callbacks'
    on_exception, tears down and calls sys.exit(1) inside its `except KeyboardInterrupt` (trainer/call.py), so
    the interrupt survives only as the SystemExit's context. A Ctrl-C before brisk's SIGINT handler takes over
    (data setup, a checkpoint being restored) ends there."""
    return exit.code == 1 and isinstance(exit.__context__, KeyboardInterrupt)


def basic_sweeper(**settings: Any) -> Any:
    """Hydra's basic sweeper, which brisk's grid sweeper (brisk.search.grid) runs without its raise at a failed job.
    Hydra ships the class only in its _internal package, and its plugin scan executes that module again after
    start-up (a class imported earlier is then another class than the one its own methods name): look it up now."""
    from hydra._internal.core_plugins import basic_sweeper

    return basic_sweeper.BasicSweeper(**settings)


def sweep_params(sweeper: Any) -> list[str]:
    """`hydra.sweeper.params` of Hydra's basic sweeper as `key=value` overrides: no public way reads them."""
    return sweeper._parse_config()


# (owner, attribute) for each private name above: what `missing()` checks.
_USED = [
    (_AcceleratorConnector, "cluster_environment"),
    (_CheckpointConnector, "hpc_save_path"),
    (_FitLoop, "_combined_loader_states_to_load"),
    (_FitLoop, "_load_combined_loader_states"),
    (ModelCheckpoint, "_should_skip_saving_checkpoint"),
    (ModelCheckpoint, "_monitor_candidates"),
    (ModelCheckpoint, "_save_topk_checkpoint"),
    (ModelCheckpoint, "_save_last_checkpoint"),
    (L.Trainer, "_accelerator_connector"),
    (L.Trainer, "_checkpoint_connector"),
    (L.Trainer, "_signal_connector"),
    (_SignalConnector, "received_sigterm"),
    (_SignalConnector, "_slurm_sigusr_handler_fn"),
]
# Hydra's BasicSweeper (looked up when used: see basic_sweeper).
_SWEEPER = ("_parse_config", "split_arguments", "get_job_batch", "is_done")
# Set in __init__ rather than on the class: checked on fresh instances in missing().
_AVERAGING = ("_average_model",)


def missing() -> list[str]:
    """The private names brisk relies on that this Lightning/Hydra no longer has. Instance attributes are
    looked for on the objects of a freshly built Trainer."""
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    instances = {
        L.Trainer: trainer,
        _FitLoop: trainer.fit_loop,
        _AcceleratorConnector: getattr(trainer, "_accelerator_connector", None),
        _CheckpointConnector: getattr(trainer, "_checkpoint_connector", None),
        _SignalConnector: getattr(trainer, "_signal_connector", None),
        ModelCheckpoint: ModelCheckpoint(),
        L.LightningModule: L.LightningModule(),
    }
    gone = [
        f"{owner.__module__}.{owner.__qualname__}.{name}"
        for owner, name in _USED
        if not hasattr(owner, name) and not hasattr(instances.get(owner), name)
    ]
    averagers = (WeightAveraging(), StochasticWeightAveraging(swa_lrs=0.1))
    gone += [f"{type(c).__name__}.{name}" for c in averagers for name in _AVERAGING if not hasattr(c, name)]
    sweeper = type(basic_sweeper(max_batch_size=None))
    gone += [f"hydra BasicSweeper.{name}" for name in _SWEEPER if not hasattr(sweeper, name)]
    if "_return_value" not in JobReturn.__dataclass_fields__:
        gone.append("hydra.core.utils.JobReturn._return_value")
    return gone
