"""PyTorch tensors and the protocol's: dtype names both ways, and a reply's tensor as a torch
tensor (its strides and offset applied), for the tests that compare with PyTorch."""
import torch

from tensorcompute.v1 import tensor_service_pb2 as pb

DTYPES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}
BY_NAME = {v: k for k, v in DTYPES.items()}


def from_pb(m: pb.Tensor) -> torch.Tensor:
    dtype = BY_NAME[pb.DType.Name(m.dtype)]
    if len(m.data) == 0:
        return torch.empty(tuple(m.shape), dtype=dtype)
    raw_dtype = torch.int16 if dtype in (torch.float16, torch.bfloat16) else dtype
    flat = torch.frombuffer(bytearray(m.data), dtype=raw_dtype).view(dtype)
    strides = tuple(m.strides) if m.strides else torch.empty(tuple(m.shape)).stride()
    return torch.as_strided(flat, tuple(m.shape), strides, m.offset).clone()
