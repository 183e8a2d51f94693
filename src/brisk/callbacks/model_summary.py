"""Lightning's model summary, with the FLOPs of one image instead of "Total FLOPs: 0"."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from brisk.models.metrics import cost


class ModelSummary(RichModelSummary):
    """Lightning counts FLOPs only over the module's `example_input_array`, which brisk's classifier has none of:
    a forward at summary time would go through the DataModule's batch hook, which takes uint8 batches with their
    labels. This counts one image at the data's size instead (brisk.models.metrics.cost), the table's FLOPs row is
    then per image. The count is kept in `cost`, which summary.json gives as `params` and `flops_per_image`: one count
    a run.

    It counts at setup, on rank 0: the net the run built, before the strategy moves, wraps or shards it."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        super().__init__(max_depth, **summarize_kwargs)
        self.cost: dict[str, int | None] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        net, datamodule = getattr(pl_module, "net", None), trainer.datamodule
        if self.cost is None and trainer.is_global_zero and net is not None and hasattr(datamodule, "image_size"):
            self.cost = cost(net, datamodule.image_size)

    def summarize(self, summary_data: list[tuple[str, list[str]]], *args: Any, total_flops: int = 0, **kw: Any) -> None:
        if flops := (self.cost or {}).get("flops_per_image"):  # the net's row holds them all, the metrics' have none
            columns = dict(summary_data)
            rows = ["-" if name != "net" else get_human_readable_count(flops) for name in columns["Name"]]
            summary_data = [(c, rows if c == "FLOPs" else values) for c, values in summary_data]
        super().summarize(summary_data, *args, total_flops=flops or total_flops, **kw)
