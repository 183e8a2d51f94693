"""The test stage's results beyond accuracy: per-class precision, recall and F1, top-5 accuracy, the confusion matrix;
what one image costs the net (parameters, FLOPs); and the training epoch's sums, kept on the device.

The metrics are torchmetrics states, updated only in test steps and computed once at the end of the test epoch:
`compute` gathers every rank's counts, so the numbers are those of the whole test split under DDP. The training
step never touches them."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.func import functional_call
from torch.utils.flop_counter import FlopCounterMode
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MulticlassPrecision,
    MulticlassRecall,
)

log = logging.getLogger("brisk")

TOP_K = 5


class ClassMetrics(torch.nn.Module):
    """Per-class precision, recall and F1 (a class never predicted has precision 0), top-5 accuracy where there are
    at least 5 classes, and the confusion matrix (rows: the true class, columns: the predicted one).

    validate_args=False: the check calls torch.unique on the labels, one more host sync per test step on a GPU."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        kw = {"num_classes": num_classes, "validate_args": False}
        # One compute group: the three read the same per-class true/false positive counts, updated once a step.
        self.per_class = MetricCollection(
            {
                "precision": MulticlassPrecision(average=None, **kw),
                "recall": MulticlassRecall(average=None, **kw),
                "f1": MulticlassF1Score(average=None, **kw),
            },
            compute_groups=[["precision", "recall", "f1"]],
        )
        self.confusion = MulticlassConfusionMatrix(**kw)
        self.top5 = MulticlassAccuracy(top_k=TOP_K, average="micro", **kw) if num_classes >= TOP_K else None

    def update(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.per_class.update(logits, y)
        self.confusion.update(logits, y)
        if self.top5 is not None:
            self.top5.update(logits, y)

    def scalars(self) -> dict[str, MulticlassAccuracy]:
        """The metrics the LightningModule logs as `test/<name>` (Lightning computes and resets them)."""
        return {"top5_acc": self.top5} if self.top5 is not None else {}

    def report(self, class_names: list[str]) -> dict[str, Any]:
        """`test_per_class` (class name -> precision, recall, f1, support) and `test_confusion_matrix` (the class
        names and the counts), as plain numbers; {} if no test step ran. Call it on every rank: compute gathers."""
        if not self.confusion.update_called:
            return {}
        values = {name: v.tolist() for name, v in self.per_class.compute().items()}
        counts = self.confusion.compute().tolist()
        self.per_class.reset()
        self.confusion.reset()
        per_class = {
            name: {**{k: v[i] for k, v in values.items()}, "support": sum(counts[i])}
            for i, name in enumerate(class_names)
        }
        return {
            "test_per_class": per_class,
            "test_confusion_matrix": {"class_names": list(class_names), "counts": counts},
        }


def cost(net: torch.nn.Module, image_size: int) -> dict[str, int | None]:
    """`params` and `flops_per_image` of `net`: torch's FlopCounterMode over one forward of one 3 x image_size x
    image_size image (FLOPs = 2 x multiply-adds of matmuls and convolutions; norms and activations are not counted).

    The forward runs on meta stand-ins for the net's parameters and buffers (torch.func.functional_call), so nothing
    is allocated or computed (test_resnet: 65 ms on a CPU), and the net's weights, BatchNorm statistics and the RNG
    are as they were: bitwise resume depends on it. In eval mode (one image through BatchNorm), each module's own mode
    put back after; outside torch.compile, so a compiled net is not compiled again for meta tensors. A net whose
    forward the meta tensors cannot take gets flops_per_image None, with a warning: the count is a courtesy."""
    params = sum(p.numel() for p in net.parameters())
    meta = {name: torch.empty_like(t, device="meta") for name, t in [*net.named_parameters(), *net.named_buffers()]}
    x = torch.zeros(1, 3, image_size, image_size, device="meta")
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            torch.compiler.disable(functional_call)(net, meta, (x,))
    except Exception as e:
        log.warning("flops_per_image not counted: the net's forward on meta tensors failed: %s", e)
        return {"params": params, "flops_per_image": None}
    finally:
        for module, training in modes:
            module.training = training
    return {"params": params, "flops_per_image": counter.get_total_flops()}
