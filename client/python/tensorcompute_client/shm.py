"""Shared-memory regions: memory this process shares with a server on the same host, so that
tensors cross no socket (and GPU memory shared through CUDA IPC, so that they never leave the
GPU).

A region is a memfd (sealed against shrinking by the server, so that it can never be
truncated under either side), mapped here and in the server. Its descriptor goes to the
server over the region socket the server names in ServerInfo; the ticket that comes back is
claimed with RegisterRegion, which binds the region to this client's identity. The region
lives until it is closed or the socket connection closes (this process exits, or the server
does: the client then registers it again with the server that takes its place).
"""
import ctypes
import ipaddress
import mmap
import os
import select
import socket
import threading
from typing import Optional
from urllib.parse import urlparse

import grpc
import numpy as np

from .errors import ClientError, from_os_error, unavailable
from .v1 import tensor_service_pb2 as pb


def _address_of(buf) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


class Region:
    """A region of `nbytes` shared with the client's servers; `array()` places NumPy arrays in
    it. It is registered with the client's home server at once and with any other replica of
    the client's the first time a call there names it, and again with a server that restarted:
    the client keeps its descriptor for that."""

    def __init__(self, client, nbytes: int, name: str = "", register: bool = True):
        if nbytes <= 0:
            raise ValueError("a region needs at least one byte")
        fd = os.memfd_create(name or "tensorcompute", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            self._mmap = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._client = client
        self._lock = threading.Lock()
        self._ids = {}  # Shm (one server process's socket connection) -> the region's id there
        self._closed = False
        self.nbytes = nbytes
        self.name = name
        self.address = _address_of(self._mmap)
        if register:
            try:
                client._register_region(self)
            except BaseException:
                self._close_fd()
                raise
        client._add_region(self)

    @property
    def id(self) -> str:
        """The region's id at the client's home server (ComputeRequest.output_region, ...)."""
        return self.id_at(self._client._shm())

    def id_at(self, state: "Shm") -> str:
        """The region's id at the server behind `state`, registering it there if it is new."""
        with self._lock:
            rid = self._ids.get(state)
            if self._closed:
                raise ValueError("the region is closed")
        if rid is not None:
            return rid
        with state.claims:
            ticket = state.register(self._fd)
            info = state.call(state.stub.RegisterRegion,
                              pb.RegisterRegionRequest(ticket=ticket, name=self.name))
        with self._lock:
            for dead in [s for s in self._ids if s.dead]:
                del self._ids[dead]
            self._ids[state] = info.region
        state.regions[info.region] = self
        return info.region

    def array(self, shape, dtype=np.float32, offset: int = 0) -> np.ndarray:
        """A C-contiguous array at byte `offset` of the region (a view: no copy)."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._mmap, dtype=dt, count=count, offset=offset).reshape(shape)

    def locate(self, lo: int, hi: int) -> Optional[int]:
        """The byte offset of address range [lo, hi) in this region, or None outside it."""
        if self.address <= lo and hi <= self.address + self.nbytes:
            return lo - self.address
        return None

    def _close_fd(self):
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self):
        """Unregisters the region. Arrays in it stay readable here; the servers forget it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ids, self._ids = self._ids, {}
        self._client._remove_region(self)
        for state, rid in ids.items():
            if state.regions.pop(rid, None) is not None and not state.dead:
                _unregister(state, rid)
        self._close_fd()


def _unregister(state: "Shm", region_id: str):
    try:
        state.call(state.stub.UnregisterRegion, pb.UnregisterRegionRequest(region=region_id))
    except Exception:  # noqa: BLE001 - the server may be gone; nothing to undo then.
        pass


def is_local_target(target: str) -> bool:
    """True for targets on this host: unix sockets, localhost and loopback addresses."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    t = target
    if "://" in t:
        t = urlparse(t).netloc or urlparse(t).path.lstrip("/")
    elif t.startswith(("ipv4:", "ipv6:", "dns:")):
        t = t.split(":", 1)[1].lstrip("/")
    host = t.rsplit(":", 1)[0] if t.count(":") == 1 or t.startswith("[") else t
    host = host.strip("[]")
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _CudaDriver:
    """The few CUDA driver calls that sharing GPU memory needs, through ctypes."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._attrs = (ctypes.c_int * len(self._ATTRIBUTES))(*self._ATTRIBUTES)
        # pointer_info's result buffers, one set per thread (made once: a call is then one
        # driver call and little else).
        self._buffers = threading.local()

    def _check(self, what, result):
        if result != 0:
            raise RuntimeError(f"{what} failed with CUDA error {result}")

    # CU_POINTER_ATTRIBUTE_BUFFER_ID, _RANGE_START_ADDR, _RANGE_SIZE,
    # _IS_LEGACY_CUDA_IPC_CAPABLE (cuda.h).
    _ATTRIBUTES = (7, 11, 12, 10)

    def pointer_info(self, ptr: int):
        """(buffer id, start, size, shareable) of the allocation holding device address
        `ptr`, in one driver call. The buffer id is unique to the allocation for the life of
        the process, so a cache keyed by it never mistakes a new allocation for a freed one."""
        n = len(self._ATTRIBUTES)
        b = self._buffers
        if not hasattr(b, "values"):
            b.values = (ctypes.c_uint64 * n)()
            b.data = (ctypes.c_void_p * n)(*[ctypes.addressof(b.values) + 8 * k
                                            for k in range(n)])
        self._check("cuPointerGetAttributes",
                    self.lib.cuPointerGetAttributes(n, self._attrs, b.data, ctypes.c_uint64(ptr)))
        v = b.values
        return v[0], v[1], v[2], (v[3] & 0xFF) != 0

    def ipc_handle(self, base: int) -> bytes:
        handle = (ctypes.c_char * 64)()
        self._check("cuIpcGetMemHandle (memory from cudaMalloc only; PyTorch's "
                    "expandable_segments cannot be shared this way)",
                    self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base)))
        return bytes(handle)

    def uuid(self, ordinal: int) -> str:
        dev, uuid = ctypes.c_int(), (ctypes.c_char * 16)()
        self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(dev), ordinal))
        self._check("cuDeviceGetUuid", self.lib.cuDeviceGetUuid(uuid, dev))
        return bytes(uuid).hex()


_driver = None


def cuda_driver() -> _CudaDriver:
    global _driver
    if _driver is None:
        _driver = _CudaDriver()
    return _driver


class DeviceRegion:
    """A GPU allocation of this process shared with the server through CUDA IPC: the server
    computes on it in place. Registered once per allocation (see Client for the cache)."""

    def __init__(self, state: "Shm", base: int, nbytes: int, handle: bytes, uuid: str):
        with state.claims:
            ticket = state.register_cuda(uuid, handle)
            info = state.call(state.stub.RegisterRegion,
                              pb.RegisterRegionRequest(ticket=ticket, name="cuda"))
        self._state = state
        self.id = info.region
        self.base = base
        self.nbytes = nbytes
        self.handle = handle

    def close(self):
        if not self._state.dead:
            _unregister(self._state, self.id)


class Shm:
    """One server process's region socket, as one connection: the regions registered through
    it live while it is open. `stub` reaches the same process over gRPC (RegisterRegion). A
    connection the server closed while it held regions means that process is gone (it exited
    or restarted): it is then `dead`, and the client opens a new one, registering its regions
    again."""

    def __init__(self, address: str, stub=None, metadata=(), timeout: float = 60.0,
                 instance: str = "", answer_within: float = 10.0):
        self.address = address
        self.stub = stub
        self.metadata = list(metadata)
        self.timeout = timeout
        self.instance = instance
        # A server answers a message on this socket at once; one that does not within this
        # many seconds is frozen (or gone): the connection is given up.
        self.answer_within = answer_within
        self.dead = False
        self.sock = self._connect()
        self.lock = threading.Lock()
        # The server holds at most 16 tickets not yet claimed per connection: threads that
        # register regions at once (a thread's scratch, Dask's threads) keep under that.
        self.claims = threading.BoundedSemaphore(8)
        self.regions = {}
        # GPU allocations shared so far, by start address and by the driver's buffer id.
        self.device_regions = {}
        self.device_buffers = {}

    def call(self, method, request):
        return method(request, timeout=self.timeout, metadata=self.metadata)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect("\0" + self.address[1:] if self.address.startswith("@")
                         else self.address)
        except OSError as e:
            sock.close()
            raise from_os_error(e, f"cannot reach region socket {self.address}") from None
        sock.settimeout(self.answer_within)
        return sock

    def _holds(self) -> bool:
        return bool(self.regions or self.device_regions)

    def alive(self) -> bool:
        """False once the server closed this connection while it held regions (one poll,
        no wait)."""
        if self.dead:
            return False
        with self.lock:
            if self.dead:
                return False
            p = select.poll()
            p.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR)
            if p.poll(0) and self._holds():
                self.dead = True
        return not self.dead

    def _ask(self, send) -> str:
        """Sends one message and returns the reply. The server closes a connection that holds
        no region and no ticket once it has been idle a while: a closed one is opened again,
        once. One that held regions closed means the server is gone: UNAVAILABLE."""
        with self.lock:
            if self.dead:
                raise unavailable(f"region socket {self.address}: the server closed it")
            reply = b""
            for attempt in (0, 1):
                try:
                    send(self.sock)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # A refusal may still wait to be read.
                except OSError as e:
                    self.dead = True
                    raise from_os_error(e, f"region socket {self.address}") from None
                try:
                    reply = self.sock.recv(512)
                except ConnectionResetError:
                    reply = b""
                except OSError as e:  # a timeout among them: a late reply would be misread
                    self.dead = True
                    raise from_os_error(e, f"region socket {self.address}") from None
                if reply or attempt == 1:
                    break
                if self._holds():
                    self.dead = True
                    break
                old, self.sock = self.sock, self._connect()
                old.close()
        reply = reply.decode(errors="replace")
        if not reply:
            raise unavailable(f"region socket {self.address}: closed by the server")
        if not reply.startswith("ticket "):
            code = (grpc.StatusCode.RESOURCE_EXHAUSTED if "quota" in reply or "limit" in reply
                    else grpc.StatusCode.FAILED_PRECONDITION)
            raise ClientError(code, f"region socket: {reply}")
        return reply.split()[1]

    def register(self, fd: int) -> str:
        return self._ask(lambda s: socket.send_fds(s, [b"register"], [fd]))

    def register_cuda(self, uuid: str, handle: bytes) -> str:
        return self._ask(lambda s: s.send(f"cuda {uuid} {handle.hex()}".encode()))

    def device_region(self, ptr: int, ordinal: int) -> "DeviceRegion":
        """The registered region holding device address `ptr`, registering its allocation
        when it is new. One driver call when it is not."""
        drv = cuda_driver()
        buffer_id, base, size, shareable = drv.pointer_info(ptr)
        r = self.device_buffers.get(buffer_id)
        if r is not None:
            return r
        if not shareable:
            raise RuntimeError(
                "this GPU memory cannot be shared through CUDA IPC (only cudaMalloc memory can: "
                "not PyTorch's expandable_segments, nor cudaMallocAsync pools)")
        old = self.device_regions.pop(base, None)
        if old is not None:  # Freed, and its address taken by this new allocation.
            self.device_buffers.pop(old.buffer_id, None)
            old.close()
        r = DeviceRegion(self, base, size, drv.ipc_handle(base), drv.uuid(ordinal))
        r.buffer_id = buffer_id
        self.device_regions[base] = r
        self.device_buffers[buffer_id] = r
        return r

    def close(self):
        """Ends the connection (and with it every region registered through it)."""
        with self.lock:
            self.dead = True
            self.regions.clear()
            self.device_regions.clear()
            self.device_buffers.clear()
            self.sock.close()
