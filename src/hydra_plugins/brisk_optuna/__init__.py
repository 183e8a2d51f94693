"""brisk's Optuna sweeper for Hydra (`hydra/sweeper=brisk_optuna`, chosen by `hparams_search=optuna`).

Hydra imports every module under the `hydra_plugins` namespace at start-up, so these modules import
nothing heavy: the search itself lives in brisk.search and is imported when a search runs.
"""
