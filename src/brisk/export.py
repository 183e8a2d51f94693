"""brisk-export ckpt_path=<ckpt> format=onnx [quantize=int8]: a model that runs without brisk, checked and measured.

Writes model.onnx (and model.int8.onnx), export.json and export.md (the fp32/int8 table) into its run
directory, and prints that directory last.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk.checkpoints import restore
from brisk.cli import entry_point
from brisk.errors import BriskError, check, check_flag
from brisk.run import checks
from brisk.run import summary as run_summary
from brisk.run.builder import build_datamodule
from brisk.utils.files import published, write_text

FORMATS, QUANTIZE = ("onnx",), (None, "int8")


def _check_request(cfg: DictConfig) -> None:
    if cfg.format not in FORMATS:
        raise BriskError(f"format={cfg.format} is not supported. Use format=onnx.")
    if cfg.quantize not in QUANTIZE:
        raise BriskError(f"quantize={cfg.quantize} is not supported. Use quantize=int8, or leave it out.")
    # Before the checkpoint is read: a bad count would fail only after the export, in onnxruntime's calibration or
    # the timing (statistics.median of no runs).
    checks.values(cfg)  # seed by brisk-train's rule
    check("export.tolerance", cfg.export.tolerance, lambda v: v >= 0, "a number >= 0")
    for key in ("calibration_batches", "bench_batch", "bench_runs"):
        check(f"export.{key}", cfg.export[key], lambda v: v >= 1, "a whole number >= 1", int)
    if cfg.export.threads is not None:  # null: every core this process may use
        check("export.threads", cfg.export.threads, lambda v: v >= 1, "a whole number >= 1 (or null)", int)
    check_flag("export.reduce_range", cfg.export.reduce_range)
    if "data" in cfg:  # +data.batch_size=... on the command line: the one process's batches
        checks.batch_split(cfg.data, 1)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        missing = f"brisk-export needs the export extra ({e.name} is missing)"
        raise BriskError(f"{missing}: pip install -e '.[export]'.") from None


def export(cfg: DictConfig) -> dict:
    _check_request(cfg)
    from brisk.deploy import onnx as ox
    from brisk.deploy import report as report

    # Hydra's job logging puts the root logger at INFO; the exporter's graph passes then log a dozen lines per export.
    for name in ("onnx_ir", "onnxscript"):
        logging.getLogger(name).setLevel(logging.WARNING)

    L.seed_everything(cfg.seed, workers=True)
    run_cfg, model, checkpoint = restore.load_run(cfg)
    datamodule = build_datamodule(run_cfg)
    mean, std, source = ox.normalization(checkpoint, datamodule)
    datamodule.mean, datamodule.std = mean, std  # the run's: setup need not compute them from the train split
    net = ox.Normalized(model.net, mean, std).eval()
    datamodule.prepare_data()
    datamodule.setup("test")
    test = list(datamodule.test_dataloader())
    reference = ox.torch_logits(net, test)
    bench = ox.as_input(torch.cat([x for x, _ in test])[: cfg.export.bench_batch])
    threads = cfg.export.threads or len(os.sched_getaffinity(0))
    class_names = list(model.hparams.class_names)  # the run's DataModule's, label 0 first, as brisk-predict's

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    fp32 = run_dir / "model.onnx"
    with published(fp32) as tmp:
        ox.to_onnx(net, torch.from_numpy(bench[:2]), tmp, class_names)
        sessions = {"fp32": ox.session(tmp, threads)}  # a session holds its model: the rename leaves it valid
        result = ox.compare(sessions["fp32"], test, reference)
        ox.check(result, cfg.export.tolerance, str(fp32))
    models = {"fp32": (fp32, result)}

    if cfg.quantize == "int8":
        from brisk.deploy.int8 import Calibration, quantize_int8

        datamodule.setup("fit")
        int8 = run_dir / "model.int8.onnx"
        with published(int8) as tmp:
            calibration = Calibration(datamodule.train_dataloader(), cfg.export.calibration_batches)
            quantize_int8(fp32, tmp, calibration, cfg.export.reduce_range)
            sessions["int8"] = ox.session(tmp, threads)
            models["int8"] = (int8, ox.compare(sessions["int8"], test, reference))

    speed = report.images_per_sec(sessions, bench, cfg.export.bench_runs)
    rows = [report.row(name, path, res, speed[name]) for name, (path, res) in models.items()]
    table = report.markdown(rows, threads, len(bench))
    summary = {
        "ckpt_path": str(cfg.ckpt_path),
        "run_dir": str(run_dir),
        "input": {"name": ox.INPUT, "shape": ["batch", *bench.shape[1:]], "dtype": "float32", "range": "0..255"},
        "normalization": {"mean": mean, "std": std, "source": source},
        "class_names": class_names,
        "torch_test_acc": result["torch_test_acc"],
        "test_images": result["images"],
        "models": rows,
        "threads": threads,
        "bench_batch": len(bench),
        "hardware": run_summary.hardware(),
    }
    run_summary.write(run_dir / "export.json", summary)
    write_text(run_dir / "export.md", table)
    print(table, flush=True)
    print(run_dir, flush=True)  # the last line, as every brisk command
    return summary


@entry_point("export")
def main(cfg: DictConfig) -> None:
    export(cfg)


if __name__ == "__main__":
    main()
