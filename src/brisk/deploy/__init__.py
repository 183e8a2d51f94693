"""brisk-export's parts: `onnx` (the graph, with preprocessing inside), `int8` (static quantization) and
`report` (the exported model's accuracy and speed next to PyTorch's)."""
