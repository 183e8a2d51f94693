"""brisk-predict ckpt_path=<ckpt> inputs=<folder | file | glob>: class probabilities for image files.

Writes predictions.csv (path,class,probability,top2_class,top2_probability,... up to `top_k`, one row per
image, ordered by path) into its run directory, and prints that directory last. The images are prepared
as in training (brisk.data.images.prepare_images at the run's image size) and normalized on the device
by the run's own DataModule, with the statistics its checkpoint holds.
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Iterable
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import BasePredictionWriter
from omegaconf import DictConfig
from torch.utils.data import DataLoader, TensorDataset

from brisk.checkpoints import restore
from brisk.cli import entry_point
from brisk.data.images import EXTENSIONS, Keys, check_max_pixels, list_images, loop_error, prepare_images
from brisk.deploy.onnx import normalization
from brisk.errors import BriskError, check
from brisk.run import checks, devices, elastic, rundir
from brisk.run.builder import build_datamodule
from brisk.run.prepare import build_trainer
from brisk.utils.files import write_text
from brisk.utils.tables import csv_rows

KEYS = Keys(max_pixels="max_pixels", skip_bad=None)  # predict's own bound; it has no setting to skip a file


def find_inputs(inputs: str) -> list[Path]:
    """The image files `inputs` names: a folder (recursively), one file, or a glob; sorted by path.

    A symbolic link back to a folder that holds it is refused, named: listing a folder refuses it (images.scan),
    and a `**` glob, which follows it 40 levels deep and finds the same images on each, is checked here."""
    if not inputs.strip():  # Path("") is the current folder: everything below it would be predicted
        raise BriskError("inputs is empty. Give a folder, an image file or a glob, e.g. inputs=images/.")
    path = Path(inputs)
    try:
        if path.is_dir():
            found = list_images(path)
        elif path.is_file():
            found = [path]
        else:
            found = sorted(Path(p) for p in glob.glob(inputs, recursive=True) if p.lower().endswith(EXTENSIONS))
            found = [p for p in found if p.is_file()]
            if link := _looping_link({p.parent for p in found}):
                raise loop_error(link)
    except BriskError as e:
        raise BriskError(f"inputs={inputs}: {e}") from None
    except OSError as e:
        raise BriskError(f"inputs={inputs}: cannot read {e.filename} ({e.strerror}).") from None
    if not found:
        raise BriskError(
            f"inputs={inputs}: no image files there. Give a folder, an image file or a glob "
            f"of {', '.join(EXTENSIONS)} files."
        )
    return found


def _looping_link(folders: Iterable[Path]) -> Path | None:
    """The first symbolic link among `folders` (which hold files, so each resolves) and the folders above them
    that points to a folder above it, or None. Each is checked once: a glob through a loop finds files 40 levels
    deep."""
    for part in sorted({above for folder in folders for above in (folder, *folder.parents)}):
        if part.is_symlink() and part.parent.resolve().is_relative_to(part.resolve()):
            return part
    return None


class Inputs(L.LightningDataModule):
    """The prepared uint8 images with their row numbers; the run's DataModule normalizes each batch on the device."""

    def __init__(self, images: torch.Tensor, data: L.LightningDataModule, batch_size: int) -> None:
        super().__init__()
        self.images, self.data, self.batch_size = images, data, batch_size

    def predict_dataloader(self) -> DataLoader:
        # Under DDP Lightning gives each rank a disjoint, unpadded share (its UnrepeatedDistributedSampler).
        return DataLoader(TensorDataset(self.images, torch.arange(len(self.images))), batch_size=self.batch_size)

    def setup(self, stage: str) -> None:
        self.data.trainer = self.trainer  # its batch hook reads the trainer's stage and precision

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        return self.data.on_after_batch_transfer(batch, dataloader_idx)


class CsvWriter(BasePredictionWriter):
    """Each rank appends its rows (row number, then top-k classes and probabilities) to its own part file."""

    def __init__(self, run_dir: Path, class_names: list[str], top_k: int) -> None:
        super().__init__(write_interval="batch")
        self.run_dir, self.class_names, self.top_k = run_dir, class_names, top_k

    def part(self, rank: int) -> Path:
        return self.run_dir / f".predictions.rank{rank}.csv"

    def on_predict_start(self, trainer, pl_module) -> None:
        self.part(trainer.global_rank).unlink(missing_ok=True)

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        probs, classes = prediction.float().topk(min(self.top_k, prediction.shape[-1]), dim=-1)
        # Never through a link planted at the part's fixed name (O_NOFOLLOW): on_predict_start removed any file there.
        fd = os.open(self.part(trainer.global_rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with open(fd, "a", newline="") as f:
            out = csv.writer(f)
            for row, p, c in zip(batch[1].tolist(), probs.tolist(), classes.tolist(), strict=True):
                out.writerow(
                    [row, *(v for pair in zip(c, p, strict=True) for v in (self.class_names[pair[0]], pair[1]))]
                )

    def merge(self, paths: list[Path], world_size: int) -> Path:
        """predictions.csv from every rank's part, in the order of `paths`; the parts are removed."""
        rows = {}
        for rank in range(world_size):
            part = self.part(rank)
            if part.exists():
                with part.open(newline="") as f:
                    rows.update((int(r[0]), r[1:]) for r in csv.reader(f))
        if len(rows) != len(paths):
            raise BriskError(f"{self.run_dir}: the ranks predicted {len(rows)} of {len(paths)} images.")
        k = min(self.top_k, len(self.class_names))
        header = ["path", "class", "probability"] + [
            f"top{i}_{c}" for i in range(2, k + 1) for c in ("class", "probability")
        ]
        out = self.run_dir / "predictions.csv"
        # written whole, and every cell one a spreadsheet cannot run (file and class names are anyone's)
        write_text(out, csv_rows([header, *([str(path), *rows[i]] for i, path in enumerate(paths))]))
        for rank in range(world_size):
            self.part(rank).unlink(missing_ok=True)
        return out


def predict(cfg: DictConfig, run: rundir.Run | None = None) -> Path:
    """`run`: the command's run directory, where TorchElastic's ranks run this command again (brisk.run.elastic);
    without it, no ranks start."""
    # seed and trainer.* by brisk-train's rules, then predict's own; devices, with the run's data, in build_trainer.
    # Before the checkpoint is read: a 0 would fail only at the end, in the DataLoader or the writer's topk.
    checks.values(cfg)
    check("top_k", cfg.top_k, lambda v: v >= 1, "a whole number >= 1", int)
    check("batch_size", cfg.batch_size, lambda v: v >= 1, "a whole number >= 1", int)
    check_max_pixels("max_pixels", cfg.max_pixels)
    L.seed_everything(cfg.seed, workers=True)
    paths = find_inputs(str(cfg.inputs))
    run_cfg, model, checkpoint = restore.load_run(cfg)
    data = build_datamodule(run_cfg)
    data.mean, data.std, _ = normalization(checkpoint, data)
    if run is not None and (n := devices.ranks_to_start(run_cfg)) > 1:
        # each rank runs this command; rank 0 merges the file
        elastic.run(cfg, run, n)
        return run.dir / "predictions.csv"
    # a file it cannot read, or one over max_pixels, stops it here, named
    images = prepare_images(paths, data.image_size, cfg.max_pixels, KEYS)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    writer = CsvWriter(run_dir, list(model.hparams.class_names), cfg.top_k)
    trainer = build_trainer(run_cfg, extra_callbacks=[writer])
    trainer.predict(model, datamodule=Inputs(images, data, cfg.batch_size), return_predictions=False)
    trainer.strategy.barrier("predictions written")
    if trainer.is_global_zero:
        writer.merge(paths, trainer.world_size)
        print(run_dir, flush=True)  # the last line, as every brisk command
    return run_dir / "predictions.csv"


@entry_point("predict")
def main(cfg: DictConfig, run: rundir.Run) -> None:
    predict(cfg, run)


if __name__ == "__main__":
    main()
