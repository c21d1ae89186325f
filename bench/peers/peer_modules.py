# SPDX-License-Identifier: Apache-2.0
"""The peers' Python modules, each optional: one that cannot be imported is None, with a
line saying so (its rows are then left out)."""
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    torch = F = None
    print(f"peer skipped: PyTorch ({e})")
try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    ort = TensorProto = helper = numpy_helper = None
    print(f"peer skipped: ONNX Runtime ({e})")
try:
    import ncnn
except ImportError as e:
    ncnn = None
    print(f"peer skipped: ncnn ({e})")
