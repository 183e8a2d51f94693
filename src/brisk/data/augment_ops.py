"""The training augmentation by name: each key of `data.augment` is a registered op, its value the op's argument
(`0`, `false` or `null`: off, and then the op is not even built).

An op is a class registered under the keys it takes (`CropFlip` under `crop_pad` and `flip`, so a crop and a flip
are one copy of the batch), built once with those keys' values, and it says when it runs:
- `uint8`: on the uint8 batch on the training device, first (`op(x, flips)`; `flips`, one bool per image, is
  set only under `flip: alternate`);
- `float`: on the batch as floats in [0, 1], as Kornia works; these ops' modules make one `nn.Sequential`, built
  once per device, and the batch is converted once on the way in and once back to uint8;
- `uint8_after`: on the uint8 batch again (cutout, as DeVries & Taylor cut the augmented image);
- `mix`: after normalization, with the labels: `op.mixer(num_classes)` gives the `(x, y) -> (x, soft y)` to run. Its
  value is a distribution's parameter, where 0 is a mistake rather than off: only `null` turns a mix key off.
Within a stage the ops run in the order of their keys in `data.augment`.

A new op is one class (`@AUGMENTS.register("blur", stage="float")` with a `module()` that returns the
`nn.Module`), and optionally `conf/augment/blur.yaml` (`# @package data.augment`, `blur: 3`). On the command line,
`+data.augment.blur=3`, or `data.augment.blur=3` once the YAML lists the key.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from brisk.data import augment as aug
from brisk.errors import BriskError, check
from brisk.registry import AUGMENTS

STAGES = ("uint8", "float", "uint8_after", "mix")
POLICIES = ("trivialaugment",)

if TYPE_CHECKING:
    from brisk.data.mixing import Mixer


def on(value: Any) -> bool:
    """Whether a key's value turns its op on: 0, false and null are off."""
    return value is not None and value is not False and not (type(value) in (int, float) and value == 0)


def off() -> dict[str, Any]:
    """Each key of the ops this module registers, at its off value: the op's default, or null where it has none.
    In the order the ops are defined here, which is the order they run in within a stage (data.augment's schema,
    brisk.run.schemas: so `data.augment.rotate=15` works without a +)."""
    keys = [k for k in AUGMENTS.registered() if AUGMENTS.get(k).__module__ == __name__]
    defaults = (inspect.signature(AUGMENTS.get(k).__init__).parameters[k].default for k in keys)
    return {k: None if d is inspect.Parameter.empty else d for k, d in zip(keys, defaults, strict=True)}


@AUGMENTS.register("crop_pad", stage="uint8")
class CropFlip:
    """Random crop with `crop_pad` px of zero padding, and horizontal flips (`true`: a random half; `alternate`:
    each image mirrored in every other epoch, airbench's derandomized flip, brisk.data.loader), in one copy."""

    def __init__(self, crop_pad: int = 0, flip: bool | str = False) -> None:
        # at most the image size: checked at setup, once the data says it (brisk.data.checks)
        check("data.augment.crop_pad", crop_pad, lambda v: v >= 0, "a whole number >= 0 (pixels)", int)
        if flip not in (True, False, "alternate"):
            raise BriskError(f"data.augment.flip={flip!r} must be true, false or alternate.", "data.augment.flip")
        self.crop_pad, self.flip = int(crop_pad), on(flip)

    def __call__(self, x: torch.Tensor, flips: torch.Tensor | None = None) -> torch.Tensor:
        return aug.random_crop(x, self.crop_pad, flips if flips is not None else self.flip)


AUGMENTS.register("flip", CropFlip, stage="uint8")


@AUGMENTS.register("cutout_size", stage="uint8_after")
class Cutout:
    """One `cutout_size` x `cutout_size` square per image zeroed (DeVries & Taylor 2017: 16 px on CIFAR-10)."""

    def __init__(self, cutout_size: int) -> None:
        check("data.augment.cutout_size", cutout_size, lambda v: v >= 0, "a whole number >= 0 (pixels)", int)
        self.size = int(cutout_size)

    def __call__(self, x: torch.Tensor, flips: torch.Tensor | None = None) -> torch.Tensor:
        return aug.cutout(x, self.size)


@AUGMENTS.register("rotate", stage="float")
class Affine:
    """Each image turned by its own angle in [-rotate, rotate] and zoomed by its own factor in `scale` (one warp
    for both: Kornia's RandomAffine)."""

    def __init__(self, rotate: float = 0, scale: list[float] | None = None) -> None:
        check("data.augment.rotate", rotate, lambda v: 0 <= v <= 180, "a number in 0..180 (degrees)")
        if scale is not None:
            pair = list(scale) if isinstance(scale, list | tuple) else []
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
            if len(pair) != 2 or not numbers:
                raise BriskError(
                    f"data.augment.scale={scale!r} must be a range [low, high], e.g. data.augment.scale=[0.9,1.1] "
                    "(or null for none)."
                )
            if not 0 < pair[0] <= pair[1]:
                fix = sorted(pair) if min(pair) > 0 else [0.9, 1.1]
                raise BriskError(
                    f"data.augment.scale={pair} must be a zoom range [low, high] with 0 < low <= high, "
                    f"e.g. data.augment.scale=[{fix[0]},{fix[1]}]."
                )
        self.rotate, self.scale = float(rotate), None if scale is None else tuple(float(s) for s in scale)

    def module(self) -> nn.Module:
        import kornia.augmentation as K  # here: a run that uses none of the float ops never imports Kornia

        return K.RandomAffine(degrees=self.rotate, scale=self.scale, p=1.0)


AUGMENTS.register("scale", Affine, stage="float")


@AUGMENTS.register("color_jitter", stage="float")
class ColorJitter:
    """Brightness, contrast and saturation, each scaled by its own factor in [1 - j, 1 + j] per image."""

    def __init__(self, color_jitter: float) -> None:
        check("data.augment.color_jitter", color_jitter, lambda v: 0 <= v <= 1, "a number in [0, 1]")
        self.strength = float(color_jitter)

    def module(self) -> nn.Module:
        import kornia.augmentation as K

        j = self.strength
        return K.ColorJitter(brightness=j, contrast=j, saturation=j, p=1.0)


@AUGMENTS.register("policy", stage="float")
class Policy:
    """TrivialAugment (Mueller & Hutter 2021): one operation per image, each image its own."""

    def __init__(self, policy: str) -> None:
        if policy not in POLICIES:
            raise BriskError(
                f"data.augment.policy={policy!r} is not a policy brisk has. Use data.augment.policy="
                f"{'|'.join(POLICIES)}, or null for none."
            )

    def module(self) -> nn.Module:
        from kornia.augmentation.auto import TrivialAugment

        from brisk.data.kornia_augment import PerImageChoice

        return PerImageChoice(list(TrivialAugment().children()))


@AUGMENTS.register("erasing", stage="float")
class Erasing:
    """With probability `erasing`, one random box of the image erased (Zhong et al. 2020)."""

    def __init__(self, erasing: float) -> None:
        check("data.augment.erasing", erasing, lambda v: 0 <= v <= 1, "a number in [0, 1] (a probability)")
        self.p = float(erasing)

    def module(self) -> nn.Module:
        import kornia.augmentation as K

        return K.RandomErasing(p=self.p)


@AUGMENTS.register("mixup_alpha", stage="mix")
class Mixing:
    """Mixup and cutmix (brisk.data.mixing): with both on, each batch gets one of the two. Each alpha is that of
    Beta(alpha, alpha), which needs alpha > 0."""

    def __init__(self, mixup_alpha: float | None = None, cutmix_alpha: float | None = None) -> None:
        for key, alpha in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if alpha is not None:
                check(f"data.augment.{key}", alpha, lambda v: v > 0, "a number > 0 (or null)")
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha

    def mixer(self, num_classes: int) -> Mixer | None:
        from brisk.data import mixing  # loaded only by the runs that mix

        return mixing.mixer(num_classes, self.mixup_alpha, self.cutmix_alpha)


AUGMENTS.register("cutmix_alpha", Mixing, stage="mix")


class Augmentation:
    """`data.augment` built: its ops by stage, each built once. Checks every key (an unregistered one, or a value
    an op refuses) when made, before anything is trained."""

    def __init__(self, augment: Mapping[str, Any] | None) -> None:
        augment = dict(augment or {})
        chosen: dict[Callable, dict[str, Any]] = {}  # op class -> its keys' values, in the order of the keys
        for key, value in augment.items():
            op = AUGMENTS.get(key, f"data.augment.{key}")
            mix = AUGMENTS.meta(key)["stage"] == "mix"
            if on(value) or (mix and value is not None):  # a mix key's 0 or false reaches its op, which refuses it
                chosen.setdefault(op, {})[key] = value
        self.alternating = augment.get("flip") == "alternate"
        self._ops: dict[str, list] = {stage: [] for stage in STAGES}
        for op, values in chosen.items():
            self._ops[AUGMENTS.meta(next(iter(values)))["stage"]].append(op(**values))
        if len(self._ops["mix"]) > 1:
            raise BriskError("data.augment: two mixing ops are on, and a batch can be mixed by one. Turn one off.")
        self._float: dict[torch.device, nn.Module] = {}

    @property
    def ops(self) -> list:
        """The per-image ops built, in the order they run."""
        return [op for stage in STAGES[:-1] for op in self._ops[stage]]

    def per_image(self, x: torch.Tensor, flips: torch.Tensor | None = None) -> torch.Tensor:
        """A uint8 batch through the uint8, float and uint8_after ops; uint8 out."""
        for op in self._ops["uint8"]:
            x = op(x, flips)
        if self._ops["float"]:
            x = self._floats(x)
        for op in self._ops["uint8_after"]:
            x = op(x, flips)
        return x

    @torch.no_grad()  # Kornia's policy ops hold their magnitudes as parameters: no graph through them
    def _floats(self, x: torch.Tensor) -> torch.Tensor:
        if x.device not in self._float:  # built once per device: their samplers then draw there
            self._float[x.device] = nn.Sequential(*(op.module() for op in self._ops["float"])).to(x.device)
        y = self._float[x.device](x.float().div_(255))
        return y.mul_(255).round_().clamp_(0, 255).to(torch.uint8)

    def mixer(self, num_classes: int) -> Callable | None:
        """The mixing op's (x, y) -> (x, soft y) for `num_classes`, or None when no mixing key is on."""
        return self._ops["mix"][0].mixer(num_classes) if self._ops["mix"] else None
