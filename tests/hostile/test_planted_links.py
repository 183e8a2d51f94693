"""Writes that follow a planted link (issue 42, class 2): every writer of a file brisk keeps is called with a
symbolic link planted at every name it could predictably use beside its target, pointing at a victim outside the
folder. The victim must stay unchanged to the byte, a link to a missing file must not create it, and the target
must hold the new content. The writers run for real, on real files; none is replaced by a stand-in, except the
trainer Lightning passes to the predictions writer, of which it reads only the rank."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from brisk import compare
from brisk.checkpoints.io import SafeCheckpointIO
from brisk.predict import CsvWriter
from brisk.run import summary as run_summary
from brisk.search import sweep
from brisk.utils.files import published, write_text

VICTIM = b"export SAFE=1\n"


def _predictable(name: str) -> list[str]:
    """`name` and the names a writer of it could use beside it: fixed temporary, backup, lock and part names, and
    one of the shape brisk's own temporary names have (an attacker's guess at the random part)."""
    suffix = Path(name).suffix
    return [
        name,  # the target itself: replaced, never written through
        f".{name}.tmp",
        f"{name}.tmp",
        f".{name}.lock",
        f"{name}~",
        f".{name}.swp",
        f"{name}.part",
        f".{name}.part",
        f".{name}.abcd1234.tmp{suffix}",
    ]


def _compare(folder: Path) -> list[str]:
    (folder / "run").mkdir()
    (folder / "run" / "summary.json").write_text(json.dumps({"metrics": {"test/acc": 0.5}, "fit_seconds": 1.0}))
    compare.main([str(folder)])
    return ["comparison.csv", "comparison.md", "comparison.png"]


def _checkpoint(folder: Path) -> list[str]:
    SafeCheckpointIO().save_checkpoint({"w": torch.ones(3)}, folder / "last.ckpt")
    return ["last.ckpt"]


def _sweep_table(folder: Path) -> list[str]:
    for job in range(2):  # the second rewrites both files
        row = {"job": job, "status": "completed", "metric": "val/acc", "value": 0.5, "run_dir": str(folder)}
        sweep.append(folder / "sweep.csv", {**row, "overrides": f"optimizer.lr={job}", "error": ""})
    return ["sweep.csv", "sweep_plot.png"]


def _predictions(folder: Path) -> list[str]:
    writer, trainer = CsvWriter(folder, ["cat", "dog"], top_k=2), SimpleNamespace(global_rank=0)
    writer.on_predict_start(trainer, None)
    writer.write_on_batch_end(trainer, None, torch.tensor([[0.2, 0.8]]), None, (None, torch.tensor([0])), 0, 0)
    writer.merge([folder / "a.png"], world_size=1)
    return ["predictions.csv"]


WRITERS = {
    "write_text": lambda folder: write_text(folder / "notes.md", "new\n") or ["notes.md"],
    "summary": lambda folder: run_summary.write(folder / "summary.json", {"fit_seconds": 1.0}) or ["summary.json"],
    "checkpoint": _checkpoint,
    "compare": _compare,
    "sweep_table": _sweep_table,
    "predictions": _predictions,
}
# Names the writers are known to write, so the links are planted before the write, and fixed helper names.
TARGETS = {
    "write_text": ["notes.md"],
    "summary": ["summary.json"],
    "checkpoint": ["last.ckpt"],
    "compare": ["comparison.csv", "comparison.md", "comparison.png"],
    "sweep_table": ["sweep.csv", "sweep_plot.png"],
    "predictions": ["predictions.csv", ".predictions.rank0.csv"],
}


@pytest.mark.parametrize("dangling", [False, True], ids=["to_a_file", "to_nothing"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_no_writer_writes_through_a_planted_link(writer, dangling, tmp_path):
    folder, outside = tmp_path / "runs", tmp_path / "home"
    folder.mkdir()
    outside.mkdir()
    victims = []
    for target in TARGETS[writer]:
        for i, name in enumerate(_predictable(target)):
            victim = outside / f"{target}.{i}.victim"
            if not dangling:
                victim.write_bytes(VICTIM)
            (folder / name).symlink_to(victim)
            victims.append(victim)

    written = WRITERS[writer](folder)

    for victim in victims:
        if dangling:
            assert not os.path.lexists(victim), f"{writer} created {victim.name} through a link"
        else:
            assert victim.read_bytes() == VICTIM, f"{writer} wrote through a link into {victim.name}"
    for name in written:
        assert stat.S_ISREG((folder / name).lstat().st_mode) and (folder / name).stat().st_size > 0
    assert sorted(p.name for p in outside.iterdir()) == ([] if dangling else sorted(v.name for v in victims))


@pytest.mark.parametrize("writer", ["write_text", "summary", "checkpoint"])
def test_a_target_that_is_a_link_is_replaced_not_written_through(writer, tmp_path):
    folder, victim = tmp_path / "runs", tmp_path / "victim"
    folder.mkdir()
    victim.write_bytes(VICTIM)
    for name in TARGETS[writer]:
        (folder / name).symlink_to(victim)
    WRITERS[writer](folder)
    assert victim.read_bytes() == VICTIM
    for name in TARGETS[writer]:
        assert not (folder / name).is_symlink() and (folder / name).read_bytes() != VICTIM


def test_temporary_names_are_new_each_time_and_leave_nothing(tmp_path):
    target, seen = tmp_path / "table.csv", set()
    for i in range(3):
        with published(target) as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".table.csv.") and tmp.suffix == ".csv"
            assert stat.S_ISREG(tmp.lstat().st_mode) and tmp.stat().st_size == 0  # made new, by this write
            seen.add(tmp.name)
            tmp.write_text(f"{i}\n")
    assert len(seen) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    assert target.read_text() == "2\n"
    # Readable as a file written with open() would be: mkstemp's 0600 is widened to what the umask allows.
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_an_abandoned_temporary_file_is_removed_and_a_live_one_kept(tmp_path):
    target = tmp_path / "last.ckpt"
    abandoned = tmp_path / ".last.ckpt.dead0000.tmp.ckpt"  # left by a writer killed mid-write
    abandoned.write_bytes(b"half a checkpoint")
    live = tmp_path / ".last.ckpt.live0000.tmp.ckpt"  # a writer in another process, still writing
    live.write_bytes(b"being written")
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    planted = tmp_path / ".last.ckpt.link0000.tmp.ckpt"
    planted.symlink_to(victim)
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as published holds it until its rename
        write_text(target, "new")
        assert not abandoned.exists() and live.read_bytes() == b"being written"
    assert victim.read_bytes() == VICTIM  # a link in the shape of a temporary name is neither followed nor opened
