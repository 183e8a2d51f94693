"""The test stage's per-class results and top-5 accuracy (torchmetrics, checked against hand counts), and the
parameter and FLOP count of summary.json (checked against a count of the layers of a real net)."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.utilities.model_summary import get_human_readable_count
from torch.utils.data import DataLoader, TensorDataset

from brisk.models import ImageClassifier
from brisk.models.metrics import ClassMetrics, cost
from brisk.models.nets import SimpleCNN
from brisk.registry import NETS
from helpers import TINY, bare_trainer, main_in_process, read_summary

# 3 classes, 10 images in two batches. Confusion (rows: true, columns: predicted): [[2,1,0],[0,1,1],[1,1,3]].
Y = [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]
PRED = [0, 0, 1, 1, 2, 2, 2, 2, 0, 1]
BY_HAND = {  # precision = diagonal / column sum, recall = diagonal / row sum, f1 = 2pr / (p + r)
    "a": {"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "support": 3},
    "b": {"precision": 1 / 3, "recall": 1 / 2, "f1": 2 / 5, "support": 2},
    "c": {"precision": 3 / 4, "recall": 3 / 5, "f1": 2 / 3, "support": 5},
}


def logits_for(pred: list[int], num_classes: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(pred), num_classes).float() * 3 - 1


def test_per_class_precision_recall_f1_are_the_hand_counts():
    metrics = ClassMetrics(3)
    for rows in (slice(0, 4), slice(4, 10)):  # two steps: the counts add up
        metrics.update(logits_for(PRED[rows], 3), torch.tensor(Y[rows]))
    report = metrics.report(["a", "b", "c"])
    assert report["test_confusion_matrix"] == {
        "class_names": ["a", "b", "c"],
        "counts": [[2, 1, 0], [0, 1, 1], [1, 1, 3]],
    }
    assert report["test_per_class"] == {c: {k: pytest.approx(v) for k, v in d.items()} for c, d in BY_HAND.items()}
    assert metrics.report(["a", "b", "c"]) == {}, "report resets the counts; a second one without steps has none"
    assert metrics.scalars() == {}, "no top-5 for 3 classes"


def test_top5_is_the_share_of_labels_among_the_five_highest_logits():
    metrics = ClassMetrics(6)
    logits = torch.tensor([5.0, 4, 3, 2, 1, 0]).repeat(4, 1)  # class 5 is always ranked last
    metrics.update(logits, torch.tensor([0, 4, 5, 5]))
    assert float(metrics.scalars()["top5_acc"].compute()) == pytest.approx(0.5)


@pytest.mark.parametrize("num_classes, top5", [(3, False), (6, True)])
def test_the_classifier_logs_top5_only_for_5_or_more_classes(num_classes, top5):
    """A real test loop: the report holds every class by name, and test/top5_acc is logged only with 5+ classes."""
    names = [f"k{i}" for i in range(num_classes)]
    net = {"type": "simple_cnn", "width": 4}
    model = ImageClassifier(net=net, optimizer={"type": "sgd"}, class_names=names)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(24, 3, 8, 8, generator=g), torch.arange(24) % num_classes)
    trainer = bare_trainer()
    trainer.test(model, DataLoader(data, batch_size=8), verbose=False)
    assert ("test/top5_acc" in trainer.callback_metrics) is top5
    report = model.test_report
    assert list(report["test_per_class"]) == names
    assert [d["support"] for d in report["test_per_class"].values()] == [24 // num_classes] * num_classes
    assert sum(map(sum, report["test_confusion_matrix"]["counts"])) == 24


def layer_flops(net: torch.nn.Module, size: int) -> int:
    """2 x multiply-adds of every conv and linear layer over one forward, counted from the layers' own shapes."""
    total = []

    def count(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            kh, kw = module.kernel_size
            total.append(2 * output.numel() * module.in_channels // module.groups * kh * kw)
        elif isinstance(module, torch.nn.Linear):
            total.append(2 * output.numel() * module.in_features)

    hooks = [m.register_forward_hook(count) for m in net.modules()]
    with torch.no_grad():
        net.eval()(torch.zeros(1, 3, size, size))
    for h in hooks:
        h.remove()
    return sum(total)


@pytest.mark.parametrize("size", [32, 64])
def test_params_and_flops_are_those_of_the_real_net_which_is_left_as_it_was(size):
    torch.manual_seed(0)
    net = SimpleCNN(num_classes=10, width=8).train()
    before, rng = {k: v.clone() for k, v in net.state_dict().items()}, torch.get_rng_state()
    got = cost(net, image_size=size)
    assert all(m.training for m in net.modules())  # each module's mode put back
    # weights, BatchNorm statistics and the RNG as they were: bitwise resume depends on it
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert got["params"] == sum(p.numel() for p in net.parameters())
    assert got["flops_per_image"] == layer_flops(net, size) > 0


@NETS.register("counted_cnn")  # SimpleCNN that counts how often a run builds it
class CountedCNN(SimpleCNN):
    builds = 0

    def __init__(self, num_classes: int = 10, width: int = 32, norm: bool = True, dropout: float = 0.0) -> None:
        type(self).builds += 1
        super().__init__(num_classes=num_classes, width=width, norm=norm, dropout=dropout)


def test_a_run_builds_its_net_once_and_counts_its_flops_once_for_the_table_and_the_summary(brisk_root, capsys):
    """Lightning's own summary says "Total FLOPs: 0" without an example input; brisk's counts one image, and
    summary.json gives the same count: both from the one net the run built, never from a second build."""
    run = brisk_root / "sum"
    args = [*TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1"]
    args += ["model.net.type=counted_cnn", "trainer.enable_model_summary=true", "callbacks.progress_bar=null"]
    CountedCNN.builds = 0
    assert main_in_process("train", [*args, f"hydra.run.dir={run}"], brisk_root) == 0
    assert CountedCNN.builds == 1
    out = capsys.readouterr().out
    flops = cost(SimpleCNN(num_classes=10, width=8), 32)["flops_per_image"]
    assert flops > 0 and f"Total FLOPs: {get_human_readable_count(flops)}" in out, out
    summary = read_summary(run)
    assert (summary["flops_per_image"], summary["params"]) == (
        flops,
        sum(p.numel() for p in SimpleCNN(width=8).parameters()),
    )
