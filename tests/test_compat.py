"""The private Lightning/Hydra names brisk relies on (all in brisk.compat) still exist."""

from brisk import compat


def test_private_apis_still_exist():
    gone = compat.missing()
    assert not gone, (
        f"these private APIs, checked on {compat.CHECKED_ON}, are gone: {gone}. "
        "Find the new way in brisk/compat.py before moving the lightning/hydra-core pins."
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
        if p.name != "compat.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not offenders, f"private Lightning/Hydra API used outside brisk/compat.py: {offenders}"
