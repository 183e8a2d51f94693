"""A wandb logger's API key, checked as the logger is built (brisk.run.loggers.check)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brisk.errors import BriskError, first_line


def check(key: str, spec: Mapping[str, Any]) -> None:
    """wandb online with no API key fails at wandb.init, in the fit, with a traceback. The key is looked up as
    wandb.init looks it up (WANDB_API_KEY or WANDB_IDENTITY_TOKEN_FILE, the .netrc entry of `wandb login`, wandb's
    settings), without its prompt and without a network call; wandb's offline and disabled modes need none.
    wandb_setup and wbauth are wandb's own modules, not its documented API: where they are gone, wandb decides."""
    if spec.get("offline") or spec.get("mode") in ("offline", "dryrun", "disabled"):
        return
    try:
        from wandb.errors import AuthenticationError
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth
    except ImportError:  # not installed: building the logger says so; or another wandb, which decides itself
        return
    settings = wandb_setup.singleton().settings  # WANDB_MODE, WANDB_BASE_URL, wandb's settings files
    if spec.get("mode") is None and settings.mode in ("offline", "dryrun", "disabled"):
        return
    try:
        found = wbauth.authenticate_session(
            host=wbauth.HostUrl(settings.base_url, app_url=settings.app_url),
            source="brisk",
            prompt=False,
            update_session=False,
        )
    except AuthenticationError as e:  # a key of the wrong form, or two kinds of credentials at once
        raise BriskError(
            f"{key}: wandb refuses its credentials ({first_line(e)}). Correct them, or log offline: "
            "WANDB_MODE=offline.",
            key,
        ) from None
    if found is None:
        raise BriskError(
            f"{key}: wandb has no API key for {settings.base_url} (WANDB_API_KEY, or ~/.netrc from `wandb login`). "
            f"Set WANDB_API_KEY, or log offline: WANDB_MODE=offline or {key}.offline=true (`wandb sync` uploads "
            "the run later).",
            key,
        )
