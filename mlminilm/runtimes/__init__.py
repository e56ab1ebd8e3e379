"""An `mlminilm export` directory at run time, for the evaluations' `--backend onnx|openvino` and the exporter's
own checks: its record (`onnx_runtime`: export.json, the graph's inputs and task) and the sessions that run the
graph as the evaluations call a PyTorch model (`onnx_runtime.OnnxModel`, `openvino_runtime.OpenVinoModel`).

On the models' floor: the evaluations import it, and it imports nothing of the exporter (mlminilm.export).
"""
