"""Plain-torch backend: user nn.Module stages and a tiny GPT.

from primuspp.backends.torch import TorchPipeline, TensorSpec, SplitLinear
"""

from primuspp.backends.torch.layers import SplitEmbedding, SplitLinear, split_parameters
from primuspp.backends.torch.pipeline import StepResult, TorchPipeline, reference_step
from primuspp.runtime.executor import TensorSpec

__all__ = [
    "SplitEmbedding",
    "SplitLinear",
    "StepResult",
    "TensorSpec",
    "TorchPipeline",
    "reference_step",
    "split_parameters",
]
