"""RunPlots: PNGs of a run in its directory: loss and accuracy by epoch, the LR schedule, the test confusion matrix.

Nothing is drawn while training. The loop only leaves what it already computed: the epoch metrics
Lightning holds in `trainer.callback_metrics` (read once per epoch) and the learning rate of each
optimizer step (a Python float from the optimizer's groups: no device sync). Drawing happens after
fit and after test, on rank 0; matplotlib is imported only then. The history is kept in checkpoints
(plain floats), so a resumed run draws its whole curves.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L

from brisk.registry import CALLBACKS
from brisk.utils.files import published

# train/ce is logged beside the optimized train/loss only with an L1 term (model.l1): it is what val/loss compares to.
CURVES = {"loss": ("train/loss", "train/ce", "val/loss"), "accuracy": ("train/acc", "val/acc")}


def _figure(**kw):
    from matplotlib.figure import Figure  # a Figure without pyplot: no GUI backend, no global state

    fig = Figure(figsize=kw.pop("figsize", (5, 3.5)))
    return fig, fig.add_subplot()


def _save(fig, path: Path) -> None:
    with published(path) as tmp:  # whole or not at all, never through a link planted in the run directory
        fig.savefig(tmp, dpi=100)


@CALLBACKS.register("plots")
class RunPlots(L.Callback):
    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)
        self.epochs: dict[int, dict[str, float]] = {}
        self.lrs: list[tuple[int, list[float]]] = []

    def state_dict(self) -> dict:
        return {"epochs": self.epochs, "lrs": self.lrs}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epochs, self.lrs = dict(state_dict["epochs"]), list(state_dict["lrs"])

    def _record_epoch(self, trainer: L.Trainer, epoch: int) -> None:
        keys = {k for pair in CURVES.values() for k in pair}
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k in keys}
        if epoch >= 0 and values:
            self.epochs[epoch] = values

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The epoch before has ended with its validation; its values are all in callback_metrics now. (During
        # on_train_epoch_end they are not: the LightningModule logs train/acc after the callbacks' hook.)
        self._record_epoch(trainer, trainer.current_epoch - 1)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if not self.lrs or self.lrs[-1][0] != step:
            self.lrs.append((step, [g["lr"] for o in trainer.optimizers for g in o.param_groups]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record_epoch(trainer, trainer.current_epoch - 1)  # the epoch counter has already moved on

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            for name, keys in CURVES.items():
                self._curves(name, keys)
            self._lr()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The counts of all ranks, gathered by the LightningModule at the end of its test epoch.
        confusion = getattr(pl_module, "test_report", {}).get("test_confusion_matrix")
        if confusion and trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            self._confusion(confusion["counts"], confusion["class_names"])

    def _curves(self, name: str, keys: tuple[str, ...]) -> None:
        fig, ax = _figure()
        for key in keys:
            points = [(e, v[key]) for e, v in sorted(self.epochs.items()) if key in v]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=key.removesuffix("_epoch"))
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel(name)
        ax.set_title(f"{name} by epoch")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        _save(fig, self.dirpath / f"{name}.png")

    def _lr(self) -> None:
        fig, ax = _figure()
        if self.lrs:
            steps = [s for s, _ in self.lrs]
            series = list(zip(*(lrs for _, lrs in self.lrs), strict=True))
            for i, group in enumerate(series):
                if group not in series[:i]:  # groups that share the schedule are drawn once
                    ax.plot(steps, group, label=f"param group {i}")
            ax.legend()
        ax.set_xlabel("optimizer step")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("learning rate")
        ax.set_title("learning rate schedule")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        _save(fig, self.dirpath / "lr.png")

    def _confusion(self, counts: list[list[int]], class_names: list[str]) -> None:
        n = len(counts)
        labels = max(map(len, class_names), default=0) * 0.07  # inches the rotated and the row labels take
        fig, ax = _figure(figsize=(2.5 + labels + 0.45 * n, 2 + labels + 0.45 * n))
        image = ax.imshow(counts, cmap="Blues")
        fig.colorbar(image, ax=ax, label="test images")
        if n <= 20:
            for i, row in enumerate(counts):
                for j, count in enumerate(row):
                    ax.text(j, i, count, ha="center", va="center", fontsize=7)
        if n <= 50:  # more names than that cannot be read at this size
            ax.set_xticks(range(n), class_names, rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
            ax.set_yticks(range(n), class_names, fontsize=8)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_title(f"test confusion matrix ({sum(map(sum, counts))} images)")
        fig.tight_layout()
        _save(fig, self.dirpath / "confusion_matrix.png")
