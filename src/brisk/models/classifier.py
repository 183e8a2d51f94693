"""ImageClassifier: the one LightningModule. The net is a plain nn.Module built from its config."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torchmetrics import MaxMetric
from torchmetrics.classification import MulticlassAccuracy

from brisk.containers import plain
from brisk.models import schedules

STAGES = ("train", "val", "test")


class ImageClassifier(L.LightningModule):
    """Cross-entropy classification of images by any net.

    Args:
        net: Hydra config of the net (`_target_` + arguments). The config, not the module, is
            kept in the hyperparameters: checkpoints then hold only plain containers and load
            with torch's default `weights_only=True`.
        optimizer: config of a partial optimizer (`_partial_: true`), called with the parameter groups.
        scheduler: config of a partial LR scheduler, or None. Its `interval` key (step|epoch) says
            how often it steps; `total_steps` is filled in from the trainer if the scheduler takes it.
        class_names: the data's classes, label 0 first (the builder passes the DataModule's): they size the
            net's output and the metrics, and a checkpoint holds them.
        label_smoothing: as in `F.cross_entropy`.
        weight_decay: applied to weights only; biases and norm parameters get none.
        l1: coefficient of an L1 penalty on all weights, added to the training loss.
        compile: compile the net (not the LightningModule, which fails on lightning 2.6.6).
    """

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        class_names: list[str],
        scheduler: dict | None = None,
        label_smoothing: float = 0.0,
        weight_decay: float = 0.0,
        l1: float = 0.0,
        compile: bool = False,
    ) -> None:
        super().__init__()
        net, optimizer, scheduler, class_names = plain(net), plain(optimizer), plain(scheduler), list(class_names)
        self.save_hyperparameters()
        num_classes = len(class_names)
        self.net = instantiate(net, num_classes=num_classes)  # a net takes num_classes: the data decides it
        if compile:
            self.net.compile()  # in place: state_dict keys stay the same as without compile
        # keyed "<stage>_acc": a ModuleDict key "train" would clash with nn.Module.train
        # validate_args=False: the check calls torch.unique on the labels, a host sync on every step on a GPU.
        self.acc = torch.nn.ModuleDict(
            {f"{s}_acc": MulticlassAccuracy(num_classes, average="micro", validate_args=False) for s in STAGES}
        )
        self.val_acc_best = MaxMetric()
        # In the checkpoint, so a resumed run reports the best over all epochs, not only the resumed ones.
        self.val_acc_best.persistent(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        # update, not forward: forward also computes this batch's accuracy, which nothing reads. The metric is
        # logged once per epoch (log_epoch): each self.log costs ~0.4 ms of Python per step on a CPU.
        self.acc[f"{stage}_acc"].update(logits, y)
        # A tensor, not a float: Lightning reduces it on the device and only syncs when it writes logs.
        train = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=train, on_epoch=True, sync_dist=not train, batch_size=len(y))
        if train and self.hparams.l1:
            loss = loss + self.hparams.l1 * sum(p.abs().sum() for p in self.net.parameters() if p.ndim > 1)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self.step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self.step(batch, "test")

    def log_epoch(self, stage: str) -> None:
        self.log(f"{stage}/acc", self.acc[f"{stage}_acc"], prog_bar=stage == "val")

    def on_train_epoch_end(self) -> None:
        self.log_epoch("train")

    def on_test_epoch_end(self) -> None:
        self.log_epoch("test")

    def on_validation_epoch_end(self) -> None:
        self.log_epoch("val")
        if not self.trainer.sanity_checking:
            self.val_acc_best(self.acc["val_acc"].compute())
            self.log("val/acc_best", self.val_acc_best.compute(), prog_bar=True)

    def configure_optimizers(self):
        decay = [p for p in self.net.parameters() if p.requires_grad and p.ndim > 1]
        no_decay = [p for p in self.net.parameters() if p.requires_grad and p.ndim <= 1]
        groups = [
            {"params": decay, "weight_decay": self.hparams.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = instantiate(self.hparams.optimizer)(groups)
        if not self.hparams.scheduler:
            return optimizer
        trainer = self.trainer
        scheduler, interval = schedules.build(
            self.hparams.scheduler,
            optimizer,
            lambda interval: trainer.estimated_stepping_batches if interval == "step" else trainer.max_epochs,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}
