"""experiment=speedrun's parts (docs/speedrun.md): the whitening layer, the per-1024-examples SGD and its schedule,
Lookahead, the time-to-accuracy clock, and the whole recipe learning the generated data."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from brisk.callbacks import Lookahead, TimeToAccuracy
from brisk.callbacks.time_to_accuracy import first_reached
from brisk.models.nets.airbench import AirbenchNet, patch_moments, whitening
from brisk.optim import PerExamplesSGD, warmup_linear
from brisk.run.builder import build_datamodule
from brisk.run.prepare import build
from helpers import TINY, compose_cfg, main_in_process, read_summary

# The recipe at a size for 2 cores: a narrow airbench net on 2000 generated images, 4 epochs (6 s). It reaches
# val/acc 0.74 at epoch 3 and 0.78 at epoch 4 (TINY's CNN: about 0.5; chance 0.1).
SMALL = [
    "experiment=speedrun",
    *[k for k in TINY if not k.startswith(("data.batch_size", "model.net.width"))],
    "data.batch_size=100",
    "model.net.widths=[32,64,64]",
    "trainer.max_epochs=4",
]


def _train_images(root, n=1000):
    cfg = compose_cfg(SMALL, root)
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()  # writes the generated set, once a session
    datamodule.setup("fit")
    return datamodule, datamodule.prepare_batch(datamodule.tensors("train")[0][:n], train=False).float()


def test_the_whitening_layer_whitens_the_training_patches(brisk_root):
    _, images = _train_images(brisk_root)
    mean, cov = patch_moments(images, 2)
    weight, bias = whitening(mean, cov, eps=1e-9)
    patches = images.double().unfold(2, 2, 1).unfold(3, 2, 1).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(0, 2)
    out = patches @ weight.double().T + bias.double()
    half = out[:, :12]  # the other 12 filters are the negatives of these
    assert half.mean(0).abs().max() < 1e-3
    assert (half.T.cov() - torch.eye(12, dtype=torch.float64)).abs().max() < 1e-2
    assert torch.allclose(out[:, 12:], -half, atol=1e-4)

    net = AirbenchNet(widths=(16, 32, 32), whiten_init=True)
    net.init_from_data(images)
    expected, _ = whitening(mean, cov)  # the net's own eps (5e-4) shrinks only the near-empty directions
    assert torch.allclose(net.whiten.weight.flatten(1), expected, atol=1e-5)
    assert not net.whiten.weight.requires_grad and net.whiten.bias.requires_grad


def test_per_examples_sgd_sets_lr_and_decay_per_1024_examples():
    w = torch.nn.Parameter(torch.ones(4))
    groups = [{"params": [w], "weight_decay": 0.0153, "lr_mult": 1.0}]
    opt = PerExamplesSGD(groups, lr=11.5, examples_per_step=1024, momentum=0.85)
    kilo = 1024 * (1 + 1 / 0.15)  # 7850: the examples one lr covers at momentum 0.85 (airbench94)
    assert opt.param_groups[0]["lr"] == pytest.approx(11.5 * 1024 / kilo)  # 1.50
    w.grad = torch.zeros(4)
    opt.step()  # no gradient: the step is the decay alone, 0.0153 x 1024 / 7850 of the weight, x (1 + m) for
    # Nesterov's first step (its buffer is the gradient itself)
    assert w.detach() == pytest.approx(torch.full((4,), 1 - 1.85 * 0.0153 * 1024 / kilo), rel=1e-6)
    half = PerExamplesSGD([torch.nn.Parameter(torch.ones(1))], lr=11.5, examples_per_step=512)
    assert half.param_groups[0]["lr"] == pytest.approx(opt.param_groups[0]["lr"] / 2)


def test_warmup_linear_rises_from_a_fifth_then_falls_to_zero():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=2.0)
    schedule = warmup_linear(opt, total_steps=100, warmup=0.2)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    assert lrs[0] == pytest.approx(0.4) and lrs[20] == pytest.approx(2.0) and max(lrs) == pytest.approx(2.0)
    assert lrs[60] == pytest.approx(1.0) and opt.param_groups[0]["lr"] == pytest.approx(0.0)


def test_lookahead_ends_as_its_slow_copy_and_resumes_it(project):
    cfg = compose_cfg([*SMALL, "trainer.max_epochs=1", "data.val_size=250", "trainer.limit_train_batches=7"], project)
    L.seed_everything(0)
    trainer, datamodule, model = build(cfg)
    trainer.fit(model, datamodule=datamodule)
    lookahead = next(c for c in trainer.callbacks if isinstance(c, Lookahead))
    floats = [t for t in model.net.state_dict().values() if t.is_floating_point()]
    assert lookahead._done == 7  # updates at steps 5 and 7 (the last)
    assert all(torch.equal(s, t) for s, t in zip(lookahead.slow, floats, strict=True))
    saved = torch.load(f"{trainer.checkpoint_callback.dirpath}/last.ckpt", weights_only=True)["callbacks"]
    state = next(v for k, v in saved.items() if k.startswith("Lookahead"))
    fresh = Lookahead()
    fresh.load_state_dict(state)
    assert fresh._done == 7 and all(torch.equal(a, b) for a, b in zip(fresh.slow, lookahead.slow, strict=True))


def test_first_reached_is_the_first_entry_at_the_target_or_none():
    history = [{"epoch": 1, "acc": 0.5}, {"epoch": 2, "acc": 0.94}, {"epoch": 3, "acc": 0.97}]
    assert first_reached(history, 0.94)["epoch"] == 2
    assert first_reached(history, 0.98) is None and first_reached([], 0.5) is None


def test_a_target_never_met_is_null(project):
    overrides = [*TINY, "callbacks.progress_bar=null", "trainer.max_epochs=1", "trainer.limit_train_batches=3"]
    cfg = compose_cfg([*overrides, "target_acc=0.999"], project)
    L.seed_everything(0)
    trainer, datamodule, model = build(cfg)
    trainer.fit(model, datamodule=datamodule)
    report = next(c for c in trainer.callbacks if isinstance(c, TimeToAccuracy)).report()
    assert report["val"] is None and report["target"] == 0.999
    assert [e["epoch"] for e in report["history"]] == [1] and report["history"][0]["acc"] < 0.999


def test_the_recipe_learns_the_generated_data_within_four_epochs(project):
    run_dir = project / "run"
    overrides = [*SMALL, "data.val_size=250", "target_acc=0.7", f"hydra.run.dir={run_dir}"]
    assert main_in_process("train", overrides, project) == 0
    clock = read_summary(run_dir)["time_to_accuracy"]
    history = clock["history"]
    assert [e["epoch"] for e in history] == [1, 2, 3, 4]
    assert all(a["seconds"] < b["seconds"] for a, b in zip(history, history[1:], strict=False))
    reached = clock["val"]
    assert reached is not None and reached["acc"] >= 0.7 and reached["epoch"] <= 4, history
    assert reached == first_reached(history, 0.7)
    test = clock["test"]
    assert test["reached"] and test["acc"] >= 0.7 and test["tta"] == "flip_translate"
    assert test["seconds"] > history[-1]["seconds"] + test["test_seconds"] * 0.99


def test_a_resumed_run_keeps_the_clock_of_its_first_part(project):
    """Stopped after epoch 1 and resumed for a second: epoch 1's entry is the first part's, and the clock goes on
    from its seconds rather than from zero."""
    run_dir = project / "run"
    first = [*TINY, "callbacks=fast", "scheduler=none", "target_acc=0.3", f"hydra.run.dir={run_dir}"]
    assert main_in_process("train", [*first, "trainer.max_epochs=1"], project) == 0
    before = read_summary(run_dir)["time_to_accuracy"]
    assert main_in_process("train", [*first, "trainer.max_epochs=2", "ckpt_path=last"], project) == 0
    after = read_summary(run_dir)["time_to_accuracy"]
    assert [e["epoch"] for e in after["history"]] == [1, 2]
    assert after["history"][0] == before["history"][0]
    assert after["history"][1]["seconds"] > before["history"][0]["seconds"]
    assert all(e["val_seconds"] > 0 for e in after["history"])


def test_dirac_convs_pass_their_input_channels_through_at_init():
    net = AirbenchNet(widths=(32, 64, 64), dirac=True)
    convs = [m for m in net.body.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 6
    x = torch.randn(2, 24, 8, 8)
    for conv in convs:
        x_in = torch.randn(2, conv.in_channels, 8, 8)
        y = conv(x_in)
        assert torch.allclose(y[:, : conv.in_channels], x_in, atol=1e-6)  # the identity on the first c_in
    plain = AirbenchNet(widths=(32, 64, 64))
    conv = next(m for m in plain.body.modules() if isinstance(m, torch.nn.Conv2d))
    assert not torch.allclose(conv(x)[:, :24], x, atol=1e-2)  # without it, no identity


# Two parts in the default suite (the whitening itself off, and lookahead off with the whitening checked after
# training); the other six in the slow tier: each is a 2-epoch fit, 30-44 s on a busy 2-core machine.
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "off",
    [
        "model.net.whiten_init=false",
        pytest.param("model.net.dirac=false", marks=SLOW),
        pytest.param("model.norm_lr_mult=1", marks=SLOW),
        "~callbacks.lookahead",
        pytest.param("model.label_smoothing=0", marks=SLOW),
        pytest.param("data.augment.flip=true", marks=SLOW),
        pytest.param("data.resident=false", marks=SLOW),
        pytest.param("scheduler=none", marks=SLOW),
    ],
)
def test_the_recipe_trains_with_any_one_part_off(project, off):
    """Two epochs of the small recipe less one part: the net still learns (val/acc 3x chance), and the whitening
    conv, where it is on, is still the data's whitening after training."""
    cfg = compose_cfg([*SMALL, "trainer.max_epochs=2", "data.val_size=250", "model.tta=none", off], project)
    L.seed_everything(0)
    trainer, datamodule, model = build(cfg)
    trainer.fit(model, datamodule=datamodule)
    assert trainer.callback_metrics["val/acc"] > 0.3, off  # 3x chance after two epochs of 17 steps
    if cfg.model.net.whiten_init:  # still the whitening of the data, after every step and lookahead update
        images = datamodule.prepare_batch(datamodule.tensors("train")[0][:5000], train=False).float()
        expected, _ = whitening(*patch_moments(images, 2))
        assert torch.allclose(model.net.whiten.weight.flatten(1), expected, atol=1e-5)
