"""Lightning's model summary, with the FLOPs of one image instead of "Total FLOPs: 0"."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from brisk.models.metrics import cost

log = logging.getLogger("brisk")


class ModelSummary(RichModelSummary):
    """Lightning counts FLOPs only over the module's `example_input_array`, which brisk's classifier has none of:
    a forward at summary time would go through the DataModule's batch hook, which takes uint8 batches with their
    labels. This counts one image at the data's size instead (brisk.models.metrics.cost: the net built on the meta
    device, nothing allocated), the figure summary.json gives as `flops_per_image`; the table's FLOPs row is then
    per image."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        super().__init__(max_depth, **summarize_kwargs)
        self._flops = 0

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        net, datamodule = getattr(pl_module.hparams, "net", None), trainer.datamodule
        if self._max_depth and trainer.is_global_zero and net is not None and hasattr(datamodule, "image_size"):
            try:
                self._flops = cost(net, len(datamodule.class_names), datamodule.image_size)["flops_per_image"]
            except Exception as e:  # the summary is a courtesy: a net the meta device cannot build keeps Lightning's 0
                log.debug("model summary: FLOPs not counted (%s)", e)
        super().on_fit_start(trainer, pl_module)

    def summarize(self, summary_data: list[tuple[str, list[str]]], *args: Any, total_flops: int = 0, **kw: Any) -> None:
        if self._flops:  # the FLOPs column: the net's row holds them all, the metrics' rows have none
            columns = dict(summary_data)
            flops = ["-" if name != "net" else get_human_readable_count(self._flops) for name in columns["Name"]]
            summary_data = [(c, flops if c == "FLOPs" else rows) for c, rows in summary_data]
        super().summarize(summary_data, *args, total_flops=self._flops or total_flops, **kw)
