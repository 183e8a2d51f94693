"""A trained net as an ONNX model that needs no brisk code, and its check in onnxruntime against PyTorch.

The exported model takes what a user has: float32 images, N x C x H x W, on the 0..255 scale (uint8
pixels cast to float). brisk's per-channel normalization is its first two ops, so the caller does
no preprocessing. The batch axis is dynamic. The class names, label 0 first, are in the model's metadata
(`class_names`, a JSON list), so a caller maps an argmax to a name without the run's files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from brisk.data import augment as aug
from brisk.data import cifar_files
from brisk.errors import BriskError

INPUT, OUTPUT = "images", "logits"
CLASS_NAMES = "class_names"  # the metadata key; ONNX metadata values are strings, so the list is JSON


class Normalized(nn.Module):
    """`net` behind brisk's normalization: 0..255 images in, logits out."""

    def __init__(self, net: nn.Module, mean: Iterable[float], std: Iterable[float]) -> None:
        super().__init__()
        self.net = net
        # training's own constants, so the folded normalization rounds the same way
        scale, shift = aug.affine(list(mean), list(std), torch.device("cpu"), torch.float32)
        self.register_buffer("scale", scale.clone())
        self.register_buffer("shift", shift.clone())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images * self.scale + self.shift)


def normalization(checkpoint: dict, datamodule: object) -> tuple[list[float], list[float], str]:
    """The mean and std the run trained with (0..255 scale), and where they came from.

    A DataModule that computes them from its data keeps them in its state_dict, which Lightning saves in
    the checkpoint under the DataModule's class name. Without them the run used the CIFAR-10 constants.
    """
    key = type(datamodule).__qualname__
    state = checkpoint.get(key)
    if isinstance(state, dict) and state.get("mean") is not None and state.get("std") is not None:
        return [float(m) for m in state["mean"]], [float(s) for s in state["std"]], f"checkpoint[{key!r}]"
    return list(cifar_files.MEAN), list(cifar_files.STD), "brisk.data.cifar_files.MEAN/STD (CIFAR-10)"


def as_input(x: torch.Tensor) -> np.ndarray:
    """A uint8 batch as the exported model takes it: float32 on the 0..255 scale."""
    return x.to(torch.float32).numpy()


def to_onnx(model: Normalized, example: torch.Tensor, path: Path, class_names: list[str]) -> None:
    """Export through torch.export (dynamo): the path torch 2.14 supports; it needs onnxscript. The class names
    go into the model's metadata_props, which onnxruntime shows as get_modelmeta().custom_metadata_map."""
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        model.eval(),
        (example,),
        dynamo=True,
        input_names=[INPUT],
        output_names=[OUTPUT],
        dynamic_shapes={INPUT: {0: batch}},
        verbose=False,
    )
    program.model.metadata_props[CLASS_NAMES] = json.dumps(list(class_names))
    program.save(str(path))


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # one op at a time: a single conv chain has no parallel branches to use
    options.log_severity_level = 3  # quant_pre_process' shape inference leaves warnings nobody can act on
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def torch_logits(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> list[np.ndarray]:
    """The PyTorch model's logits for every batch: the reference each export is checked against."""
    with torch.inference_mode():
        return [model(torch.from_numpy(as_input(x))).numpy() for x, _ in batches]


def compare(sess, batches: list[tuple[torch.Tensor, torch.Tensor]], reference: list[np.ndarray]) -> dict[str, float]:
    """Run every batch through onnxruntime: max |logit difference| to `reference`, and both accuracies."""
    worst, right, right_torch, n = 0.0, 0, 0, 0
    for (x, y), theirs in zip(batches, reference, strict=True):
        ours = sess.run([OUTPUT], {INPUT: as_input(x)})[0]
        worst = max(worst, float(np.abs(ours - theirs).max()))
        right += int((ours.argmax(1) == y.numpy()).sum())
        right_torch += int((theirs.argmax(1) == y.numpy()).sum())
        n += len(y)
    return {"max_abs_logit_diff": worst, "test_acc": right / n, "torch_test_acc": right_torch / n, "images": n}


def check(result: dict[str, float], tolerance: float, name: str) -> None:
    if not result["max_abs_logit_diff"] <= tolerance:  # `not <=`: a NaN difference is refused too
        raise BriskError(
            f"{name}: onnxruntime's logits differ from PyTorch's by up to {result['max_abs_logit_diff']:.3g} on "
            f"{result['images']} test images, more than export.tolerance={tolerance:g}; the model was not written. "
            "Report it with the net's config; raise export.tolerance only if you accept that difference."
        )
