"""ImageClassifier: the one LightningModule. The net is a plain nn.Module built from its config."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torchmetrics import MaxMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from brisk import compat
from brisk.containers import plain
from brisk.errors import BriskError
from brisk.models import schedules
from brisk.models.sparsity import fold_masks

EVAL_STAGES = ("val", "test")
TTA = ("none", "flip", "flip_translate")


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
        tta: test-time augmentation in test and predict (not in val: it would cost 2-6x on every epoch).
            `flip` averages the logits of each image and its mirror; `flip_translate` also those of 1 px
            shifts, as in airbench94's TTA (KellerJordan/cifar10-airbench).
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
        tta: str = "none",
    ) -> None:
        super().__init__()
        if tta not in TTA:
            raise BriskError(f"model.tta={tta} is unknown. Choose one of: {', '.join(TTA)}.")
        net, optimizer, scheduler, class_names = plain(net), plain(optimizer), plain(scheduler), list(class_names)
        self.save_hyperparameters()
        num_classes = len(class_names)
        self.net = instantiate(net, num_classes=num_classes)  # a net takes num_classes: the data decides it
        if compile:
            self.net.compile()  # in place: state_dict keys stay the same as without compile
        # keyed "<stage>_acc": a ModuleDict key "train" would clash with nn.Module.train
        # validate_args=False: the check calls torch.unique on the labels, a host sync on every step on a GPU.
        self.acc = torch.nn.ModuleDict(
            {f"{s}_acc": MulticlassAccuracy(num_classes, average="micro", validate_args=False) for s in EVAL_STAGES}
        )
        # Read by brisk.callbacks.RunPlots after test; not in checkpoints (torchmetrics states are not persistent).
        self.test_confusion = MulticlassConfusionMatrix(num_classes, validate_args=False)
        # The training epoch's summed batch losses and correct count, kept on the device (see step): made at the
        # first step, not buffers, so that 16-true and bf16-true, which convert the module's floating buffers, do
        # not sum the losses in 16 bits. Its batch and image counts: a list, so that counting is no
        # nn.Module.__setattr__ per step.
        self.train_sums: tuple[torch.Tensor, torch.Tensor] | None = None
        self.train_seen = [0, 0]
        self.val_acc_best = MaxMetric()
        # In the checkpoint, so a resumed run reports the best over all epochs, not only the resumed ones.
        self.val_acc_best.persistent(True)
        compat.skip_empty_hooks(self, compat.TRAINING_HOOKS)  # six empty hooks: ~230 Python calls a step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def infer(self, x: torch.Tensor) -> torch.Tensor:
        """Logits with the test-time augmentation `tta`; the plain forward when it is `none`."""
        tta = self.hparams.tta
        if tta == "none":
            return self(x)

        def mirrored(v: torch.Tensor) -> torch.Tensor:
            return 0.5 * (self(v) + self(v.flip(-1)))

        logits = mirrored(x)
        if tta == "flip":
            return logits
        # Two more views, shifted 1 px up-left and down-right with reflected borders, each with its mirror,
        # weighted as one half of the vote: airbench94's tta_level=2 (KellerJordan/cifar10-airbench).
        h, w = x.shape[-2:]
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        return 0.5 * logits + 0.25 * (mirrored(padded[..., :h, :w]) + mirrored(padded[..., 2:, 2:]))

    def step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        logits = self.infer(x) if stage == "test" else self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        if stage != "train":
            # update, not forward: forward also computes this batch's accuracy, which nothing reads.
            self.acc[f"{stage}_acc"].update(logits, y)
            if stage == "test":
                self.test_confusion.update(logits, y)
            self.log(f"{stage}/loss", loss, sync_dist=True, batch_size=len(y))
            return loss
        # The hot path. A self.log costs ~0.1-0.4 ms of Python and a torchmetrics update ~0.1 ms per step
        # (nil-compute figures: brisk-bench's overhead breakdown), so the epoch's loss and correct count are
        # summed on the device, with no host sync, and logged once per epoch (every training batch has the same
        # size: drop_last); the step loss goes to Lightning only on the steps on which it writes logs.
        # In place, two adds: the stacked sum it replaces took 14 us instead of 10 (one CPU thread).
        if self.train_sums is None:  # float32 said outright: in a *-true precision the default dtype is 16-bit here
            device = y.device
            self.train_sums = (
                torch.zeros((), dtype=torch.float32, device=device),
                torch.zeros((), device=device).long(),
            )
        loss_sum, correct = self.train_sums
        loss_sum.add_(loss.detach())
        correct.add_((logits.detach().argmax(-1) == y).sum())
        seen = self.train_seen
        seen[0] += 1
        seen[1] += len(y)
        if compat.logs_this_step(self.trainer):
            self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        if self.hparams.l1:
            loss = loss + self.hparams.l1 * sum(p.abs().sum() for p in self.net.parameters() if p.ndim > 1)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self.step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self.step(batch, "test")

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        """Class probabilities, with the test-time augmentation `tta`."""
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.infer(x).softmax(-1)

    def log_epoch(self, stage: str) -> None:
        self.log(f"{stage}/acc", self.acc[f"{stage}_acc"], prog_bar=stage == "val")

    def on_train_epoch_start(self) -> None:
        self.train_sums = None
        self.train_seen[:] = [0, 0]

    def on_train_epoch_end(self) -> None:
        batches, images = self.train_seen
        if batches:  # the ranks ran as many batches of one size, so the mean over ranks is exact
            loss_sum, correct = self.train_sums
            self.log("train/loss", loss_sum / batches, sync_dist=True)
            self.log("train/acc", correct / images, sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self.log_epoch("test")

    def on_validation_epoch_end(self) -> None:
        self.log_epoch("val")
        if not self.trainer.sanity_checking:
            self.val_acc_best(self.acc["val_acc"].compute())
            self.log("val/acc_best", self.val_acc_best.compute(), prog_bar=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # After every callback's hook: pruning masks folded into the weights, so a checkpoint loads into a fresh net.
        fold_masks(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # Lightning's EMA (WeightAveraging) saves the averaged weights as `state_dict`, the raw ones as
        # `current_model_state`, and puts the raw ones back into the model on load, also for trainer.test
        # (lightning 2.6.6). Outside fit the averaged weights are the model: the ones validation chose it by.
        if "current_model_state" in checkpoint and not self._fitting():
            checkpoint["current_model_state"] = checkpoint["state_dict"]

    def _fitting(self) -> bool:
        try:
            return self.trainer.state.fn == "fit"
        except RuntimeError:  # not attached to a Trainer (load_from_checkpoint)
            return False

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
