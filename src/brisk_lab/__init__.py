"""The speed lab behind `brisk-bench`: what each training lever costs and saves, measured side by side.

One concern per module: `clock` times steps, `memory` reads peaks, `fit` runs a measured brisk fit,
`plain` the same work as a bare PyTorch loop, `pipeline` the input pipelines, `overhead` and `levers`
the comparisons, `report` and `plots` the outputs, `run` the order of it all.
"""
