"""brisk's Hydra configs, a package so that packages built on brisk reach them as `pkg://brisk.conf`:
the lab's bench.yaml puts them on its search path."""
