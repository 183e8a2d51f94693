"""brisk's grid sweeper for Hydra (`hydra/sweeper=grid`, brisk-train's default for -m; conf/hydra/sweeper/grid.yaml).

Hydra imports every module under the `hydra_plugins` namespace at start-up, so these modules import nothing
heavy: the sweep itself lives in brisk.search.grid.
"""
