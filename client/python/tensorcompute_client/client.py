"""The client: a channel reused for every call, deadlines, chunked streaming, resident tensors."""
import ctypes
from dataclasses import dataclass
from typing import Iterable, Optional

import grpc
import numpy as np

from .v1 import tensor_service_pb2 as pb
from .v1 import tensor_service_pb2_grpc as pb_grpc

_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): pb.bool, np.dtype(np.uint8): pb.uint8, np.dtype(np.int8): pb.int8,
    np.dtype(np.int16): pb.int16, np.dtype(np.int32): pb.int32, np.dtype(np.int64): pb.int64,
    np.dtype(np.float16): pb.float16, np.dtype(np.float32): pb.float32,
    np.dtype(np.float64): pb.float64,
}
_WIRE_TO_NUMPY = {v: k for k, v in _NUMPY_TO_WIRE.items()}
# bfloat16 travels as its 16 bits; NumPy has no such type, so it arrives as uint16 bits (or
# as a torch.bfloat16 tensor with as_torch=True).
_WIRE_TO_NUMPY[pb.bfloat16] = np.dtype(np.uint16)


def _torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        return None


def _as_numpy(x):
    """(array, wire dtype) for a NumPy array, a PyTorch tensor or anything np.asarray takes."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), pb.bfloat16
        return t.numpy(), None
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    return a, None


def to_tensor(x) -> pb.Tensor:
    """A wire Tensor for `x` without making it contiguous: the bytes between its lowest and
    highest element, and its strides and offset (in elements) into them."""
    a, wire = _as_numpy(x)
    if wire is None:
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        wire = _NUMPY_TO_WIRE.get(np.dtype(a.dtype.str.replace(">", "<").replace("=", "<")))
        if wire is None:
            raise TypeError(f"dtype {a.dtype} is not supported by tensorcompute")
    item = a.itemsize
    if a.size == 0:
        return pb.Tensor(dtype=wire, shape=a.shape)
    if any(s % item for s in a.strides):
        a = np.ascontiguousarray(a)  # Strides that are not whole elements: a copy is needed.
    ptr = a.__array_interface__["data"][0]
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + item
    if lo % item:
        # Misaligned storage: widen the span down to an element boundary of the address.
        lo -= lo % item
    data = ctypes.string_at(lo, hi - lo)
    return pb.Tensor(dtype=wire, shape=a.shape, strides=[s // item for s in a.strides],
                     offset=(ptr - lo) // item, data=data)


def from_tensor(t: pb.Tensor, as_torch: bool = False):
    """A NumPy array (or torch tensor) of a wire Tensor with its data, honouring its strides."""
    dt = _WIRE_TO_NUMPY[t.dtype]
    flat = np.frombuffer(t.data, dtype=dt)
    shape = tuple(t.shape)
    strides = tuple(t.strides) if len(t.strides) else None
    if strides is None:
        arr = flat[t.offset:t.offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
    else:
        arr = np.lib.stride_tricks.as_strided(flat[t.offset:], shape=shape,
                                              strides=tuple(s * dt.itemsize for s in strides))
    arr = np.array(arr)  # Own the memory, writable.
    if as_torch:
        torch = _torch()
        if torch is None:
            raise RuntimeError("as_torch=True needs torch")
        out = torch.from_numpy(arr.view(np.int16) if t.dtype == pb.bfloat16 else arr)
        return out.view(torch.bfloat16) if t.dtype == pb.bfloat16 else out
    return arr


@dataclass
class Resident:
    """A tensor kept on the server: its handle and metadata (pass it as an input)."""
    tensor: pb.Tensor

    @property
    def handle(self) -> str:
        return self.tensor.handle

    @property
    def shape(self):
        return tuple(self.tensor.shape)


def _attribute(v) -> pb.Attribute:
    if isinstance(v, bool) or isinstance(v, np.bool_):
        return pb.Attribute(bool_value=bool(v))
    if isinstance(v, (int, np.integer)):
        return pb.Attribute(int_value=int(v))
    if isinstance(v, (float, np.floating)):
        return pb.Attribute(float_value=float(v))
    if isinstance(v, str):
        wire = getattr(pb, v, None)
        if isinstance(wire, int) and v in pb.DType.keys():
            return pb.Attribute(dtype_value=wire)
        return pb.Attribute(string_value=v)
    raise TypeError(f"attribute value {v!r} is not a bool, int, float or str")


class Client:
    def __init__(self, target: str, timeout: float = 60.0,
                 max_message_bytes: int = 256 << 20, chunk_bytes: int = 1 << 20,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None):
        """`credentials`: grpc.ssl_channel_credentials(...) for TLS (and client certificates);
        `token`: a bearer token sent with every call."""
        options = [("grpc.max_receive_message_length", max_message_bytes),
                   ("grpc.max_send_message_length", max_message_bytes)]
        self.channel = (grpc.secure_channel(target, credentials, options) if credentials
                        else grpc.insecure_channel(target, options))
        self.stub = pb_grpc.TensorServiceStub(self.channel)
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.chunk_bytes = chunk_bytes
        self.metadata = [("authorization", f"Bearer {token}")] if token else None

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def server_info(self) -> pb.ServerInfoResponse:
        return self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=self.timeout, metadata=self.metadata)

    def list_ops(self):
        return list(self.stub.ListOps(pb.ListOpsRequest(), timeout=self.timeout, metadata=self.metadata).ops)

    def _input(self, x) -> pb.Tensor:
        if isinstance(x, Resident):
            return pb.Tensor(handle=x.handle)
        if isinstance(x, pb.Tensor):
            return x
        return to_tensor(x)

    def compute(self, op: str, *inputs, output_dtype: Optional[str] = None,
                keep_resident: bool = False, as_torch: bool = False,
                stream: Optional[bool] = None, **attributes):
        """Runs `op`; returns a NumPy array (torch tensor with as_torch), or a Resident with
        keep_resident. Inputs too large for one message (or stream=True) go in chunks."""
        request = pb.ComputeRequest(op=op, inputs=[self._input(x) for x in inputs],
                                    attributes={k: _attribute(v) for k, v in attributes.items()},
                                    keep_output_resident=keep_resident)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        size = sum(len(t.data) for t in request.inputs)
        if stream is None:
            stream = size > self.max_message_bytes // 2
        if stream:
            out = self._compute_stream(request)
        else:
            out = self.stub.Compute(request, timeout=self.timeout, metadata=self.metadata).output
        if keep_resident:
            return Resident(out)
        return from_tensor(out, as_torch=as_torch)

    def _compute_stream(self, request: pb.ComputeRequest) -> pb.Tensor:
        header = pb.ComputeRequest()
        header.CopyFrom(request)
        for t in header.inputs:
            if not t.handle:
                t.storage_bytes = len(t.data)
                t.ClearField("data")

        def messages():
            yield pb.ComputeStreamRequest(header=header)
            for i, t in enumerate(request.inputs):
                for at in range(0, len(t.data), self.chunk_bytes):
                    yield pb.ComputeStreamRequest(chunk=pb.DataChunk(
                        tensor=i, offset=at, data=t.data[at:at + self.chunk_bytes]))

        return _assemble(self.stub.ComputeStream(messages(), timeout=self.timeout, metadata=self.metadata))

    def upload(self, x, ttl_seconds: int = 0) -> Resident:
        t = to_tensor(x)
        data = t.data
        meta = pb.Tensor()
        meta.CopyFrom(t)
        meta.ClearField("data")
        meta.storage_bytes = len(data)

        def messages():
            yield pb.UploadRequest(header=pb.UploadHeader(tensor=meta, ttl_seconds=ttl_seconds))
            for at in range(0, len(data), self.chunk_bytes):
                yield pb.UploadRequest(chunk=pb.DataChunk(offset=at,
                                                          data=data[at:at + self.chunk_bytes]))

        return Resident(self.stub.Upload(messages(), timeout=self.timeout, metadata=self.metadata).tensor)

    def download(self, resident: Resident, as_torch: bool = False):
        stream = self.stub.Download(pb.DownloadRequest(handle=resident.handle,
                                                       chunk_bytes=self.chunk_bytes),
                                    timeout=self.timeout, metadata=self.metadata)
        return from_tensor(_assemble(stream), as_torch=as_torch)

    def release(self, *residents: Resident) -> int:
        reply = self.stub.Release(pb.ReleaseRequest(handles=[r.handle for r in residents]),
                                  timeout=self.timeout, metadata=self.metadata)
        return reply.released_bytes


def _assemble(replies: Iterable[pb.TensorStreamMessage]) -> pb.Tensor:
    """One Tensor (with data) from a header and its chunks."""
    out = None
    parts = []
    expected = 0
    for m in replies:
        if m.HasField("header"):
            out = m.header
            continue
        if out is None:
            raise RuntimeError("server sent a chunk before the header")
        if not parts:
            expected = m.chunk.offset
        if m.chunk.offset != expected:
            raise RuntimeError("server sent chunks out of order")
        parts.append(m.chunk.data)
        expected += len(m.chunk.data)
    if out is None:
        raise RuntimeError("server sent no header")
    result = pb.Tensor()
    result.CopyFrom(out)
    if parts:
        result.data = b"".join(parts)
    return result
