"""Runs written before configs picked classes by name: their saved configs and checkpoints name the shipped classes
by code path (`_target_: torch.optim.SGD`, `_partial_: true`). Read here as the names they have now, place by place
and string for string: nothing is imported, and a path this table does not hold stays, to be refused."""

from __future__ import annotations

from typing import Any

# place -> {the _target_ earlier brisk wrote there: the registered name now}
TYPES = {
    "model.net": {
        "brisk.models.nets.SimpleCNN": "simple_cnn",
        "brisk.models.nets.cifar_resnet18": "resnet18",
        "brisk.models.nets.AirbenchNet": "airbench",
        "brisk.models.nets.TimmNet": "timm",
    },
    "optimizer": {
        "torch.optim.SGD": "sgd",
        "torch.optim.Adam": "adam",
        "torch.optim.AdamW": "adamw",
        "brisk.optim.PerExamplesSGD": "sgd_per_1024",
        "brisk.optim.MuonWithAdamW": "muon",
        "brisk.models.muon.MuonWithAdamW": "muon",
    },
    "scheduler": {
        "torch.optim.lr_scheduler.OneCycleLR": "onecycle",
        "torch.optim.lr_scheduler.StepLR": "step",
        "brisk.optim.cosine_with_warmup": "cosine",
        "brisk.optim.warmup_linear": "warmup_linear",
        "brisk.optim.exp_decay": "exp_decay",
        "brisk.models.schedules.cosine_with_warmup": "cosine",
        "brisk.models.schedules.exp_decay": "exp_decay",
    },
    "data": {
        "brisk.data.CIFAR10DataModule": "cifar10",
        "brisk.data.SyntheticDataModule": "synthetic",
        "brisk.data.ImageFolderDataModule": "image_folder",
    },
}
# The LightningModule was a `_target_` too; it is the one class brisk builds there, so the key just goes.
CLASSIFIER = "brisk.models.ImageClassifier"


def _section(content: dict, place: str) -> Any:
    node: Any = content
    for part in place.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def renamed(content: dict) -> dict:
    """A run file's plain sections (data, model, optimizer, scheduler), with each shipped `_target_` of an
    earlier brisk at its own place turned into its `type`, in place; `_partial_: true` beside it goes too."""
    for place, names in TYPES.items():
        node = _section(content, place)
        if isinstance(node, dict) and isinstance(node.get("_target_"), str) and node["_target_"] in names:
            node["type"] = names[node.pop("_target_")]
            if node.get("_partial_") is True:
                del node["_partial_"]
    model = content.get("model")
    if isinstance(model, dict) and model.get("_target_") == CLASSIFIER:
        del model["_target_"]
    return content
