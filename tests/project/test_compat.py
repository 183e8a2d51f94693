"""The private Lightning/Hydra names brisk relies on (all in brisk.compat) still exist, and the Hydra messages and
Lightning exits brisk reads still say what compat expects."""

import signal

import pytest
from hydra.errors import ConfigCompositionException, InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel
from omegaconf import OmegaConf

from brisk import compat, fastloop
from helpers import bare_trainer, compose_cfg


def test_private_apis_still_exist():
    gone = compat.missing() + fastloop.missing()
    assert not gone, (
        f"these private APIs, checked on {compat.CHECKED_ON}, are gone: {gone}. "
        "Find the new way in brisk/compat.py (brisk/fastloop.py for the speed tricks) before moving the pins."
    )


def test_private_apis_are_used_only_in_compat():
    import re
    from pathlib import Path

    src = Path(compat.__file__).parent
    private = re.compile(
        r"from (lightning|hydra)[\w.]* import _|(lightning|hydra)\.[\w.]*\._[a-z]"
        r"|(trainer|fit_loop|epoch_loop|strategy|launcher|checkpoint_callback|job_return)\._[a-z]"
    )
    offenders = [
        f"{p.relative_to(src)}:{i}"
        for p in src.rglob("*.py")
        if p.name not in ("compat.py", "fastloop.py")  # fastloop: the speed tricks, with their own missing()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not offenders, f"private Lightning/Hydra API used outside brisk/compat.py and fastloop.py: {offenders}"


def test_hydra_names_the_target_and_key_of_a_failed_call():
    cfg = OmegaConf.create(
        {"call": {"_target_": "datetime.timedelta", "fortnights": 1}, "find": {"_target_": "no_such_module.Thing"}}
    )
    for key, target in (("call", "datetime.timedelta"), ("find", "no_such_module.Thing")):
        with pytest.raises(InstantiationException) as raised:
            instantiate(cfg[key])
        assert compat.instantiation_site(raised.value) == (target, key)
    with pytest.raises(InstantiationException) as raised:
        instantiate({"_target_": "datetime.timedelta", "fortnights": 1})  # a plain dict: no key
    assert compat.instantiation_site(raised.value) == ("datetime.timedelta", None)


def test_hydra_names_the_override_a_comma_made_ambiguous(tmp_path):
    with pytest.raises(ConfigCompositionException) as raised:
        compose_cfg(["data.root=/a,b"], tmp_path)
    assert compat.ambiguous_override(raised.value) == "data.root=/a,b"


def test_lightning_ends_a_stage_interrupted_by_ctrl_c_with_exit_1():

    class CtrlCInSetup(BoringDataModule):
        def setup(self, stage: str) -> None:
            raise KeyboardInterrupt

    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as raised:
            bare_trainer(max_steps=1).fit(BoringModel(), datamodule=CtrlCInSetup())
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT from then on
    assert compat.stopped_for_ctrl_c(raised.value)
    assert not compat.stopped_for_ctrl_c(SystemExit(1))
