"""Pruning: Lightning's ModelPruning, raised gradually to a target sparsity, with checkpoints that hold plain weights.

The notes call this lever "gradient pruning"; what is pruned is weights. At the end of each epoch of the
schedule, the conv and linear weights of smallest magnitude (L1, ranked globally across layers) are set to
zero, and a mask holds them there for the rest of training. What brisk adds to ModelPruning:

- The schedule. Sparsity after epoch e is S (1 - (1 - k/n)^3), k = e - start_epoch + 1 of n pruning epochs
  (Zhu & Gupta 2017, "To prune, or not to prune"): large steps early, small ones near S. It reaches S at the
  end of `end_epoch`, by default the next-to-last epoch, so the last epoch trains with the final mask.
  Each epoch prunes the number of weights that brings the total to the scheduled sparsity, counted from
  the masks in place: a resumed run, whose checkpoint holds the zeroed weights but no masks, rebuilds
  the same mask first (zeros have the smallest magnitude).
- Only weights with >= 2 dims: ModelPruning's default also prunes biases and normalisation scales.
- Weight averaging. EMA and SWA keep a copy of the model and pair its tensors with the model's by
  position; pruning renames `weight` to `weight_orig` and adds a `weight_mask` buffer, so the copies
  get the same masks, and `callbacks=[ema,prune]` averages and tests the pruned net.
- The end. The masks are folded into the weights when fit ends (in the model and in the copies), and
  every checkpoint is written without them (ImageClassifier.on_save_checkpoint), so it loads into a
  freshly built net with weights_only=True.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelPruning
from torch import nn
from torch.nn.utils import prune

from brisk import compat
from brisk.registry import CALLBACKS


@CALLBACKS.register("prune")
class Pruning(ModelPruning):
    def __init__(
        self,
        amount: float = 0.5,
        start_epoch: int = 0,
        end_epoch: int | None = None,
        pruning_fn: str = "l1_unstructured",
        **kwargs,
    ) -> None:
        if not 0.0 <= amount < 1.0:
            raise ValueError(f"callbacks.prune.amount={amount} is the final sparsity: a fraction in [0, 1).")
        self.target, self.start_epoch, self.end_epoch = amount, start_epoch, end_epoch
        self._weights: list[tuple[nn.Module, str]] = []
        self._trainer: L.Trainer | None = None
        super().__init__(
            pruning_fn,
            parameter_names=["weight"],
            amount=self.amount_at,
            use_lottery_ticket_hypothesis=False,  # Lightning's default resets the kept weights to their init
            make_pruning_permanent=False,  # brisk folds the masks itself: see the module docstring
            **kwargs,
        )

    def filter_parameters_to_prune(self, parameters_to_prune=()):
        self._weights = [(m, name) for m, name in parameters_to_prune if getattr(m, name).ndim >= 2]
        return self._weights

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._trainer = trainer
        if stage == "fit" and self.end_epoch is None:
            if trainer.max_epochs is None or trainer.max_epochs < 0:
                raise ValueError("callbacks.prune.end_epoch must be set when trainer.max_epochs is unbounded.")
            self.end_epoch = max(self.start_epoch, trainer.max_epochs - 2)

    def scheduled(self, epoch: int) -> float:
        """The sparsity the schedule asks for after `epoch` (0-based)."""
        if epoch < self.start_epoch:
            return 0.0
        n = self.end_epoch - self.start_epoch + 1
        k = min(epoch - self.start_epoch + 1, n)
        return self.target * (1 - (1 - k / n) ** 3)

    def amount_at(self, epoch: int) -> int:
        """How many more weights to prune at the end of `epoch`: ModelPruning prunes that many of those left."""
        total = sum(getattr(m, name).numel() for m, name in self._weights)
        masked = sum(
            int((getattr(m, f"{name}_mask") == 0).sum()) for m, name in self._weights if hasattr(m, f"{name}_mask")
        )
        return max(0, round(self.scheduled(epoch) * total) - masked)

    def _copies(self) -> list[nn.Module]:
        copies = [compat.averaged_module(c) for c in (self._trainer.callbacks if self._trainer else [])]
        return [c for c in copies if c is not None]

    def apply_pruning(self, amount: int | float) -> None:
        super().apply_pruning(amount)
        module_names = {id(m): name for name, m in self._trainer.lightning_module.named_modules()}
        for copy in self._copies():
            for module, name in self._weights:
                mask = getattr(module, f"{name}_mask")
                twin = copy.get_submodule(module_names[id(module)])
                if hasattr(twin, f"{name}_mask"):
                    getattr(twin, f"{name}_mask").copy_(mask)
                else:
                    prune.custom_from_mask(twin, name, mask.detach().to(getattr(twin, name).device, copy=True))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for module in [pl_module, *self._copies()]:
            self.make_pruning_permanent(module)
