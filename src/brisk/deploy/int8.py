"""int8 static quantization of an exported model with onnxruntime, calibrated on training batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from brisk.deploy.onnx import INPUT, as_input


class Calibration(CalibrationDataReader):
    """The first `n` training batches, as the exported model takes them."""

    def __init__(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], n: int) -> None:
        self.batches = itertools.islice(batches, n)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x, _ = next(self.batches, (None, None))
        return None if x is None else {INPUT: as_input(x)}


def quantize_int8(fp32: Path, out: Path, calibration: Calibration, reduce_range: bool) -> None:
    """Static int8 quantization: QDQ format, per-channel weights, activation ranges (MinMax) from calibration.

    uint8 activations with int8 weights (U8S8) in QDQ format: what quantize_static's own guide (onnxruntime
    1.32) recommends for x86 CPUs; `reduce_range` (7-bit weights) for x86 CPUs without VNNI, whose 8-bit
    products can saturate.
    """
    prepared = out.with_name(f".{out.name}.pre.onnx")
    try:
        # shape inference and graph cleanup first, as onnxruntime's quantization guide asks
        quant_pre_process(str(fp32), str(prepared))
        quantize_static(
            str(prepared),
            str(out),
            calibration,
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
        )
    finally:
        prepared.unlink(missing_ok=True)
