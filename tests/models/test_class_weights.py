"""Class weights for imbalanced data, and the training loss with soft targets: `auto` is the train split's inverse
class frequency, a wrong list is refused in one line, the weights reach the loss and survive a checkpoint, and a
one-hot soft target gives the loss of its int label, with weights and label smoothing."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from brisk.data import TensorDataModule
from brisk.errors import BriskError
from brisk.models import ImageClassifier
from brisk.models.losses import cross_entropy
from helpers import BASE, RUNS, assert_user_error, bare_trainer, brisk_train, tree

NET = {"type": "simple_cnn", "width": 4}
SGD = {"type": "sgd", "lr": 0.05}
COUNTS = (6, 3, 1)  # an imbalanced train split of 3 classes
# by hand: 1/count = 1/6, 1/3, 1, whose mean is 1/2; divided by it
EXPECTED = [1 / 3, 2 / 3, 2.0]


class Imbalanced(TensorDataModule):
    """10 random 32x32 images with the labels of COUNTS, no val split: the train split is exactly these."""

    @property
    def class_names(self) -> list[str]:
        return ["a", "b", "c"]

    @property
    def image_size(self) -> int:
        return 32

    def read(self, split: str):
        if split != "train":
            return None
        labels = torch.cat([torch.full((n,), c) for c, n in enumerate(COUNTS)])
        return torch.randint(0, 256, (len(labels), 3, 32, 32), dtype=torch.uint8), labels


def test_auto_weights_are_the_inverse_frequency_in_the_loss_and_the_checkpoint(tmp_path):
    model = ImageClassifier(net=NET, optimizer=SGD, class_names=["a", "b", "c"], class_weights="auto")
    expected = torch.tensor(EXPECTED)
    losses = []

    class Record(L.Callback):
        """The loss the step should return, from the weights the step starts with."""

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            x, y = batch
            with torch.no_grad():
                losses.append(float(F.cross_entropy(pl_module(x), y, weight=expected)))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses[-1] = (losses[-1], float(outputs["loss"]))

    trainer = bare_trainer(max_epochs=1, limit_val_batches=0, callbacks=[Record()])
    trainer.fit(model, datamodule=Imbalanced(batch_size=5, val_size=0))
    assert torch.allclose(model.class_weight, expected)
    assert len(losses) == 2 and all(want == pytest.approx(got, rel=1e-5) for want, got in losses)

    path = tmp_path / "w.ckpt"
    trainer.save_checkpoint(path)
    loaded = ImageClassifier.load_from_checkpoint(path, weights_only=True)
    assert torch.allclose(loaded.class_weight, expected)  # not the placeholder ones of `auto` before fit


def test_no_weights_keep_the_state_dict_as_it_was():
    model = ImageClassifier(net=NET, optimizer=SGD, class_names=["a", "b"])
    assert model.class_weight is None and "class_weight" not in model.state_dict()


@pytest.mark.parametrize("weights", [[1.0, 2.0], [1.0, 2.0, 0.0], [1.0, float("inf"), 1.0], "often"])
def test_a_bad_weight_list_is_refused(weights):
    with pytest.raises(BriskError, match="model.class_weights"):
        ImageClassifier(net=NET, optimizer=SGD, class_names=["a", "b", "c"], class_weights=weights)


def test_a_list_of_the_wrong_length_stops_brisk_train_in_one_line(project, capsys, monkeypatch):
    before = tree(project)
    proc = brisk_train([*BASE, "model.class_weights=[1,2,3]"], project, capsys, monkeypatch)
    assert_user_error(proc, "model.class_weights=[1, 2, 3]", "10 finite positive numbers")
    assert not (project / RUNS).exists() or not any((project / RUNS).iterdir())
    assert tree(project) == before


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_one_hot_soft_targets_give_the_loss_of_their_labels(smoothing, weighted):
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(16, 5, generator=g), torch.randint(5, (16,), generator=g)
    weight = torch.rand(5, generator=g) + 0.5 if weighted else None
    hard = cross_entropy(logits, labels, weight, smoothing)
    soft = cross_entropy(logits, F.one_hot(labels, 5).float(), weight, smoothing)
    assert hard == pytest.approx(float(F.cross_entropy(logits, labels, weight=weight, label_smoothing=smoothing)))
    assert soft == pytest.approx(float(hard), rel=1e-6)
    # a mixed target is the same weighted mean: sum_i sum_c w_c t_ic (-log p_ic) / sum_i sum_c w_c t_ic
    t = torch.softmax(torch.randn(16, 5, generator=g), -1)
    w = torch.ones(5) if weight is None else weight
    smoothed = t * (1 - smoothing) + smoothing / 5
    want = -(smoothed * w * logits.log_softmax(-1)).sum() / (t * w).sum()
    assert cross_entropy(logits, t, weight, smoothing) == pytest.approx(float(want), rel=1e-6)
