"""The lab's configs: bench.yaml and the groups only brisk-bench has (preset/, model/nil.yaml)."""
