"""ImageClassifier: the one LightningModule. The net is a plain nn.Module built from its config."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MaxMetric
from torchmetrics.classification import MulticlassAccuracy

from brisk.errors import BriskError, check
from brisk.models import from_data, losses, param_groups
from brisk.models.metrics import ClassMetrics
from brisk.models.sparsity import fold_masks
from brisk.optim import schedules
from brisk.registry import NETS, OPTIMIZERS, arguments
from brisk.utils.config import plain

EVAL_STAGES = ("val", "test")
# What a fit logs every epoch (the self.log calls below), so what a callback can watch: brisk.run.builder refuses an
# early-stopping monitor outside it. Left out: train/ce (logged only with l1) and the per-step train/loss_step.
FIT_METRICS = ("val/acc", "val/loss", "val/acc_best", "train/loss", "train/acc")
TTA = ("none", "flip", "flip_translate")


def check_optimizer(optimizer: Mapping[str, Any], scheduler: Mapping[str, Any] | None = None) -> None:
    """What the optimizer's and the schedule's configs may not hold, refused as the model is built: brisk.train builds
    it before any data is read, and the optimizer and schedule themselves are built only in configure_optimizers,
    after it. A weight decay in the optimizer's config would do nothing: the parameter groups set their own."""
    if optimizer.get("lr") is not None:
        check("optimizer.lr", optimizer["lr"], lambda v: v > 0, "a positive number, e.g. optimizer.lr=0.05")
    if "momentum" in optimizer:
        check("optimizer.momentum", optimizer["momentum"], lambda v: 0 <= v <= 1, "a number in [0, 1]")
    if scheduler and "pct_start" in scheduler:  # OneCycleLR's warm-up, a share of the run's steps
        check("scheduler.pct_start", scheduler["pct_start"], lambda v: 0 < v < 1, "a number in (0, 1)")
    if scheduler and "step_size" in scheduler:  # StepLR's: torch takes 0, and divides by it at the first step
        check("scheduler.step_size", scheduler["step_size"], lambda v: v >= 1, "a whole number >= 1 (epochs)", int)
    if "weight_decay" in optimizer:
        value = optimizer["weight_decay"]
        raise BriskError(
            f"optimizer.weight_decay={value} would do nothing: the classifier sets weight decay on its parameter "
            f"groups, which override the optimizer's. Use model.weight_decay={value} instead (biases and norm "
            "parameters get none)."
        )


class ImageClassifier(L.LightningModule):
    """Cross-entropy classification of images by any net.

    Args:
        net: config of the net: its registered `type` (brisk.registry.NETS) and arguments. The config, not the
            module, is kept in the hyperparameters: checkpoints then hold only plain containers, name no code, and
            load with torch's default `weights_only=True`.
        optimizer: config of the optimizer (`type` in brisk.registry.OPTIMIZERS), built with the parameter groups.
        scheduler: config of the LR scheduler (`type` in brisk.registry.SCHEDULES), or None. Its `interval` key
            (step|epoch) says how often it steps; `total_steps` is filled in from the trainer if the scheduler takes it.
        class_names: the data's classes, label 0 first (the builder passes the DataModule's): they size the
            net's output and the metrics, and a checkpoint holds them.
        label_smoothing: as in `F.cross_entropy`.
        class_weights: weights of the classes in the training loss: `none`, `auto` (inverse frequency in the
            train split, mean 1, computed when fit starts) or one positive number per class (brisk.models.losses).
            The val and test losses stay unweighted: they measure the model on the data as it is, the same
            quantity with and without weights, so runs compare. In a buffer: on the device, and in checkpoints.
        weight_decay: applied to weights only; biases and norm parameters get none. It is set on the parameter
            groups, which override an optimizer's own `weight_decay`, so the optimizer config may not hold one.
            5e-4 with SGD at momentum 0.9, as Wide ResNet trains on CIFAR (Zagoruyko & Komodakis, 2016).
        l1: coefficient of an L1 penalty on the weights (biases and norm parameters excluded), added to the
            training loss.
        compile: compile the net (not the LightningModule, which fails on lightning 2.6.6).
        freeze_backbone: train only the net's head (`get_classifier()`), the rest frozen, its BatchNorm included.
        backbone_lr_mult: the backbone's lr as a multiple of the head's (brisk.models.param_groups says how).
        norm_lr_mult: the lr of biases and norm parameters as a multiple of the weights' (airbench94: 64).
        tta: test-time augmentation in test and predict (not in val: it would cost 2-6x on every epoch).
            `flip` averages the logits of each image and its mirror; `flip_translate` also those of 1 px
            shifts, as in airbench94's TTA (KellerJordan/cifar10-airbench).

    Logged: `train/loss`, the loss that is optimized (with the L1 term), per epoch and as `train/loss_step` on
    Lightning's logging steps; `train/ce`, the cross-entropy alone, per epoch when `l1` > 0 (it compares with
    `val/loss`, which has no penalty); `train/acc`; `val/loss`, `val/acc`, `val/acc_best`; `test/loss`, `test/acc`,
    `test/top5_acc` (5 or more classes).
    """

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        class_names: list[str],
        scheduler: dict | None = None,
        label_smoothing: float = 0.0,
        class_weights: str | list[float] | None = "none",
        weight_decay: float = 5e-4,
        l1: float = 0.0,
        compile: bool = False,
        tta: str = "none",
        freeze_backbone: bool = False,
        backbone_lr_mult: float = 1.0,
        norm_lr_mult: float = 1.0,
    ) -> None:
        super().__init__()
        check("model.label_smoothing", label_smoothing, lambda v: 0 <= v < 1, "a number in [0, 1)")
        check("model.weight_decay", weight_decay, lambda v: v >= 0, "a number >= 0")
        check("model.l1", l1, lambda v: v >= 0, "a number >= 0")
        check("model.norm_lr_mult", norm_lr_mult, lambda v: v > 0, "a number > 0")
        if tta not in TTA:
            raise BriskError(f"model.tta={tta} is unknown. Choose one of: {', '.join(TTA)}.")
        net, optimizer, scheduler, class_names = plain(net), plain(optimizer), plain(scheduler), list(class_names)
        class_weights = plain(class_weights)
        weights = losses.class_weights(class_weights, len(class_names))
        if "dropout" in net:  # every shipped net's; torch's Dropout takes NaN, and fails on it at the first forward
            check("model.net.dropout", net["dropout"], lambda v: 0 <= v < 1, "a number in [0, 1)")
        check_optimizer(optimizer, scheduler)
        self.save_hyperparameters()
        num_classes = len(class_names)
        self.net = NETS.build(net, num_classes=num_classes)  # a net takes num_classes: the data decides it
        param_groups.check(self.net, freeze_backbone, backbone_lr_mult)
        if freeze_backbone:
            param_groups.freeze_backbone(self.net)
        if compile:
            self.net.compile()  # in place: state_dict keys stay the same as without compile
        # keyed "<stage>_acc": a ModuleDict key "train" would clash with nn.Module.train
        # validate_args=False: the check calls torch.unique on the labels, a host sync on every step on a GPU.
        self.acc = torch.nn.ModuleDict(
            {f"{s}_acc": MulticlassAccuracy(num_classes, average="micro", validate_args=False) for s in EVAL_STAGES}
        )
        # Per-class results, top-5, the confusion matrix: test steps only. Not in checkpoints (torchmetrics states are
        # not persistent). `test_report` holds them as plain numbers after a test: summary.json, eval.json, RunPlots.
        self.test_metrics = ClassMetrics(num_classes)
        self.test_report: dict[str, Any] = {}
        self.val_acc_best = MaxMetric()
        # In the checkpoint, so a resumed run reports the best over all epochs, not only the resumed ones.
        self.val_acc_best.persistent(True)
        self.register_buffer("class_weight", weights)  # None (no state_dict entry) for `none`
        self._sums: torch.Tensor | None = None  # the training epoch's [loss, ce, correct], see training_step
        self._batches = self._images = 0

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

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        x, y = batch  # y: int labels, or class probabilities after mixup/cutmix (brisk.data.mixing)
        logits = self(x)
        ce = losses.cross_entropy(logits, y, self.class_weight, self.hparams.label_smoothing)
        loss = ce + self.hparams.l1 * self.weights_l1() if self.hparams.l1 else ce
        # The epoch's means are sums on the device, logged once at its end: a self.log per step costs ~2,000 calls,
        # and torchmetrics' MeanMetric reads the device twice per update (a GPU sync every step). float32, made at
        # the first step: 16-true and bf16-true make 16 bits the default dtype in the step, and a bf16 sum of 15
        # losses is off by ~1%. train/acc against a soft target counts the argmax of the target: its larger share.
        labels = y.argmax(-1) if y.is_floating_point() else y
        if self._sums is None:
            self._sums = torch.zeros(3, dtype=torch.float32, device=loss.device)  # loss, correct, ce
        sums = self._sums
        sums[0] += loss.detach()
        sums[1] += (logits.argmax(-1) == labels).sum()
        if self.hparams.l1:
            sums[2] += ce.detach()
        self._batches, self._images = self._batches + 1, self._images + len(labels)
        self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        self._score(self(x), y, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        logits = self.infer(x)
        self.test_metrics.update(logits, y)
        self._score(logits, y, "test")

    def _score(self, logits: torch.Tensor, y: torch.Tensor, stage: str) -> None:
        """The unweighted loss, logged as the epoch's mean, and the stage's accuracy updated."""
        # update, not forward: forward also computes this batch's accuracy, which nothing reads.
        self.acc[f"{stage}_acc"].update(logits, y)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        self.log(f"{stage}/loss", loss, sync_dist=True, batch_size=len(y))

    def setup(self, stage: str) -> None:
        # After the DataModule's setup, before a resumed checkpoint is restored (it holds the same values), and
        # before Lightning moves the model to its device: the whitening is computed on the CPU.
        if stage == "fit":
            self.init_from_data(self.trainer.datamodule, whiten=not self.trainer.ckpt_path)

    def init_from_data(self, datamodule: L.LightningDataModule, whiten: bool = True) -> None:
        """What a fit takes from its data before the first step: AirbenchNet's whitening (`whiten`: false on a
        resume, whose checkpoint has it) and `class_weights=auto`. A loop other than Lightning's (the lab's plain
        loop) calls it as setup does."""
        if whiten and getattr(self.net, "whiten_init", False):
            self.data_init_seconds = from_data.init_net(self.net, datamodule, self.device)
        if self.hparams.class_weights == losses.AUTO:
            counts = getattr(datamodule, "class_counts", None)
            if counts is None:
                raise BriskError(
                    "model.class_weights=auto counts the train split of a brisk DataModule: fit with "
                    "datamodule=<a TensorDataModule>, or give the weights as a list."
                )
            self.class_weight.copy_(losses.inverse_frequency(counts()))

    def weights_l1(self) -> torch.Tensor:
        """sum |w| over the net's weights (the parameters of 2 or more dimensions): what `l1` penalises."""
        return sum(p.abs().sum() for p in self.net.parameters() if p.ndim > 1)

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        """Class probabilities, with the test-time augmentation `tta`."""
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.infer(x).softmax(-1)

    def log_epoch(self, stage: str) -> None:
        self.log(f"{stage}/acc", self.acc[f"{stage}_acc"], prog_bar=stage == "val")

    def on_train_epoch_start(self) -> None:
        self._sums, self._batches, self._images = None, 0, 0

    def on_train_epoch_end(self) -> None:
        if self._sums is None:  # an epoch without a step
            return
        # The ranks ran as many batches of one size, so the mean over ranks is exact.
        loss, correct, ce = self._sums
        self.log("train/loss", loss / self._batches, sync_dist=True)
        self.log("train/acc", correct / self._images, sync_dist=True)
        if self.hparams.l1:  # the cross-entropy alone, which compares with val/loss
            self.log("train/ce", ce / self._batches, sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self.log_epoch("test")
        for name, metric in self.test_metrics.scalars().items():
            self.log(f"test/{name}", metric)
        self.test_report = self.test_metrics.report(self.hparams.class_names)  # on every rank: compute gathers

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
        # The trainer is read only when asked: a model with neither needs none (a Python user's first look).
        return self.optimizers_for(
            lambda: from_data.examples_per_step(self.trainer, self.hparams.optimizer),
            lambda i: self.trainer.estimated_stepping_batches if i == "step" else self.trainer.max_epochs,
        )

    def optimizers_for(self, examples_per_step: Callable[[], int], total_steps: Callable[[str], int]):
        """configure_optimizers' answer for a fit of `examples_per_step()` examples per optimizer step (asked only
        by an optimizer stated per example) and `total_steps(interval)` scheduler steps (asked only by a schedule
        that takes its length): a loop other than Lightning's builds the same optimizer and schedule from its own
        counts."""
        h = self.hparams
        groups = param_groups.groups(self.net, h.weight_decay, h.backbone_lr_mult, h.get("norm_lr_mult", 1.0))
        given = {"params": groups}
        if "examples_per_step" in arguments(OPTIMIZERS.get(h.optimizer.get("type")))[0]:
            given["examples_per_step"] = examples_per_step()  # brisk.optim.PerExamplesSGD
        optimizer = OPTIMIZERS.build(h.optimizer, **given)
        param_groups.scale_lrs(optimizer)
        if not h.scheduler:
            return optimizer
        scheduler, interval = schedules.build(h.scheduler, optimizer, total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}
