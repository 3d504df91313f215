"""The native transport: libtensorcompute_native (the C++ client library behind a C interface)
loaded through ctypes. Large tensors then travel from the arrays' own memory over several
connections at once, on the library's threads, without the interpreter lock; results land in
memory that becomes the returned array without a copy.

`pip install client/python` builds the library into the package (setup.py). It is looked for
in $TENSORCOMPUTE_NATIVE_LIB, beside this package, then on the system's library path. Without
it the client uses grpcio alone, and says why once."""
import ctypes
import ctypes.util
import os
import threading
import weakref
from typing import List, Optional, Sequence, Tuple

import grpc
import numpy as np

from .errors import ClientError
from .v1 import tensor_service_pb2 as pb

_lock = threading.Lock()
_lib = None
_load_error: Optional[str] = None

# gRPC status codes by number, for the errors the library reports.
_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _candidates() -> List[str]:
    out = []
    env = os.environ.get("TENSORCOMPUTE_NATIVE_LIB")
    if env:
        out.append(env)
    out.append(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "libtensorcompute_native.so"))
    found = ctypes.util.find_library("tensorcompute_native")
    if found:
        out.append(found)
    return out


# glibc's malloc gives a buffer of 128 KiB or more its own mapping and hands it back to the
# kernel when freed (then raises that bar as it sees larger frees, up to 32 MiB), and trims its
# heaps as soon as their free top passes 128 KiB: the transfer threads' chunk buffers (1 MiB
# and more, gRPC's and ours) are then faulted in, zeroed and unmapped again on every call,
# which costs a large transfer a fifth of its rate (256 MiB add on the H200 machine, 8
# connections: 8.3-9.0 GB/s as is, 9.8-10.8 with the settings below, 10.8-10.9 with tcmalloc
# preloaded). So where the library is loaded, buffers up to 32 MiB come from the heap, and a
# heap keeps up to 1 GiB of free memory for the next call, unless the process set its own
# (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, GLIBC_TUNABLES) or
# TENSORCOMPUTE_NATIVE_MALLOC=0.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _tune_malloc():
    if os.environ.get("TENSORCOMPUTE_NATIVE_MALLOC", "1") == "0":
        return
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return
    if "malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return  # Not glibc.
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)


def load():
    """The library, or None (see error())."""
    global _lib, _load_error
    with _lock:
        if _lib is not None or _load_error is not None:
            return _lib
        errors = []
        for path in _candidates():
            if os.path.sep in path and not os.path.exists(path):
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            c = ctypes
            if not hasattr(lib, "tcn_compute_within"):
                errors.append(f"{path}: older than this package (no tcn_compute_within)")
                continue
            lib.tcn_connect.restype = c.c_void_p
            lib.tcn_connect.argtypes = [c.c_char_p] * 6 + [c.c_double, c.c_int64, c.c_int,
                                                           c.c_int64, c.c_int64, c.c_char_p,
                                                           c.c_char_p, c.c_int]
            lib.tcn_close.argtypes = [c.c_void_p]
            lib.tcn_compute.restype = c.c_void_p
            lib.tcn_compute.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t,
                                        c.POINTER(c.c_void_p), c.POINTER(c.c_int64), c.c_int,
                                        c.POINTER(c.c_int), c.c_char_p, c.c_size_t]
            # The same with a deadline of its own (seconds; 0: the client's timeout).
            lib.tcn_compute_within.restype = c.c_void_p
            lib.tcn_compute_within.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t,
                                               c.POINTER(c.c_void_p), c.POINTER(c.c_int64),
                                               c.c_int, c.c_double, c.POINTER(c.c_int),
                                               c.c_char_p, c.c_size_t]
            lib.tcn_upload.restype = c.c_void_p
            lib.tcn_upload.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t, c.c_void_p, c.c_int64,
                                       c.c_int64, c.POINTER(c.c_int), c.c_char_p, c.c_size_t]
            lib.tcn_download.restype = c.c_void_p
            lib.tcn_download.argtypes = [c.c_void_p, c.c_char_p, c.c_int64, c.POINTER(c.c_int),
                                         c.c_char_p, c.c_size_t]
            lib.tcn_result_meta.restype = c.c_size_t
            lib.tcn_result_meta.argtypes = [c.c_void_p, c.POINTER(c.c_void_p)]
            lib.tcn_result_data.restype = c.c_size_t
            lib.tcn_result_data.argtypes = [c.c_void_p, c.POINTER(c.c_void_p)]
            lib.tcn_result_free.argtypes = [c.c_void_p]
            _tune_malloc()
            _lib = lib
            return _lib
        _load_error = "; ".join(errors) or "libtensorcompute_native.so not found"
        # The install's own reason, where it could not build the library.
        note = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_not_built.txt")
        if not errors and os.path.exists(note):
            with open(note) as f:
                _load_error = f"not built at install: {f.read().strip()}"
        return None


def error() -> Optional[str]:
    return _load_error


class NativeError(ClientError):
    """A failed call through the native library, shaped like grpcio's errors."""


class NativeClient:
    def __init__(self, target: str, timeout: float, max_message_bytes: int, chunk_bytes: int,
                 token: Optional[str], connections: int, spread_bytes: int,
                 session: Optional[str] = None, tls: Optional[Sequence[str]] = None,
                 home: Optional[str] = None, retry_attempts: int = 0):
        self._lib = load()
        if self._lib is None:
            raise RuntimeError(f"no native library: {error()}")
        enc = lambda s: s.encode() if s else None  # noqa: E731
        # tls: CA, certificate, key (paths or PEM text) and the name to check, or None.
        ca, cert, key, name = tls if tls is not None else (None,) * 4
        # home: where the target names several replicas, the one stateful calls go to.
        # retry_attempts: tries of a stateless call in the library (0: its default; 1: the
        # caller retries, on another replica).
        self._handle = self._lib.tcn_connect(enc(target), enc(token), enc(ca), enc(cert),
                                             enc(key), enc(name),
                                             float(timeout), int(max_message_bytes),
                                             int(connections), int(spread_bytes),
                                             int(chunk_bytes), enc(session), enc(home),
                                             int(retry_attempts))
        self._finalizer = weakref.finalize(self, self._lib.tcn_close, self._handle)

    def close(self):
        self._finalizer()

    def _call(self, fn, *args):
        """Calls a tcn_* function that returns a result; raises NativeError on failure."""
        code = ctypes.c_int(0)
        err = ctypes.create_string_buffer(2048)
        res = fn(self._handle, *args, ctypes.byref(code), err, len(err))
        if not res:
            raise NativeError(_CODES.get(code.value, grpc.StatusCode.UNKNOWN),
                              err.value.decode(errors="replace"))
        return res

    def _take(self, res) -> Tuple[bytes, Optional[np.ndarray]]:
        """A result's metadata bytes, and its data as a uint8 array over the library's memory
        (freed when the last view of it goes), or None."""
        lib = self._lib
        meta_ptr = ctypes.c_void_p()
        meta_len = lib.tcn_result_meta(res, ctypes.byref(meta_ptr))
        meta = ctypes.string_at(meta_ptr.value, meta_len) if meta_len else b""
        data_ptr = ctypes.c_void_p()
        size = lib.tcn_result_data(res, ctypes.byref(data_ptr))
        if size == 0:
            lib.tcn_result_free(res)
            return meta, None
        buf = (ctypes.c_uint8 * size).from_address(data_ptr.value)
        weakref.finalize(buf, lib.tcn_result_free, res)
        return meta, np.frombuffer(buf, dtype=np.uint8)

    def upload(self, tensor: pb.Tensor, address: int, size: int,
               ttl_seconds: int) -> pb.UploadResponse:
        """Stores the tensor whose storage is `size` bytes at `address` (tensor's metadata)."""
        body = tensor.SerializeToString()
        res = self._call(self._lib.tcn_upload, body, len(body), address, size, ttl_seconds)
        meta, _ = self._take(res)
        return pb.UploadResponse.FromString(meta)

    def download(self, handle: str, storage_bytes: int) -> Optional[np.ndarray]:
        """A resident tensor's storage bytes, as a uint8 array over the library's memory."""
        res = self._call(self._lib.tcn_download, handle.encode(), storage_bytes)
        return self._take(res)[1]

    def compute(self, request: pb.ComputeRequest, inputs: Sequence[Tuple[int, int]],
                timeout: float = 0.0) -> Tuple[pb.Tensor, Optional[np.ndarray]]:
        """Runs `request`, whose inline inputs carry no data: input i's bytes are at address
        inputs[i][0], inputs[i][1] long. The output's metadata, and its storage bytes as a
        uint8 array over the library's memory (None when there are none). `timeout`: seconds
        the whole call may take (0: the client's timeout)."""
        n = len(inputs)
        ptrs = (ctypes.c_void_p * max(1, n))(*[p for p, _ in inputs])
        sizes = (ctypes.c_int64 * max(1, n))(*[s for _, s in inputs])
        body = request.SerializeToString()
        res = self._call(self._lib.tcn_compute_within, body, len(body), ptrs, sizes, n,
                         float(timeout))
        meta, data = self._take(res)
        return pb.Tensor.FromString(meta), data
