"""PyTorch tensors as the worker client's flat numpy arrays, and back. Pure.

The client moves numpy arrays of the wire's dtypes (float32, float16, float64, int32,
int64, uint8, int8). A contiguous CPU tensor is seen in place (no copy); any other is copied
once each way. O(size) at most per call.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["TensorError", "flat_view", "numpy_dtype", "write_back"]

_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
           torch.int32: np.int32, torch.int64: np.int64, torch.uint8: np.uint8,
           torch.int8: np.int8}


class TensorError(TypeError):
    """A tensor netstorm cannot carry (its dtype)."""


def numpy_dtype(tensor: torch.Tensor, what: str) -> np.dtype:
    """The wire dtype of ``tensor``, or :class:`TensorError` naming ``what`` it is."""
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise TensorError(f"{what}: dtype {tensor.dtype} cannot travel through netstorm "
                          f"(it carries {', '.join(str(d) for d in _DTYPES)}); convert it, "
                          f"e.g. model.float()")
    return np.dtype(dtype)


def flat_view(tensor: torch.Tensor, what: str) -> tuple:
    """``(array, in_place)``: ``tensor``'s elements as a flat numpy array; ``in_place``: the
    array is the tensor's own memory (a contiguous CPU tensor), else a copy."""
    numpy_dtype(tensor, what)
    data = tensor.detach()
    in_place = data.device.type == "cpu" and data.is_contiguous()
    if not in_place:
        data = data.to("cpu").contiguous()
    return data.reshape(-1).numpy(), in_place


def write_back(tensor: torch.Tensor, array: np.ndarray, in_place: bool) -> None:
    """``array`` (from :func:`flat_view` of ``tensor``, written since) into ``tensor``,
    unless it is the tensor's own memory already."""
    if not in_place:
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(array).view(tensor.shape))
