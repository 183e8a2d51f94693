"""The lab's own config groups (preset/), found by brisk-bench only: conf/bench.yaml puts them on its search path."""
