"""Several servers behind one client target, as the C++ client reads them (client/replicas.h):
"host:port,host:port" lists replicas, "ipv4:a:p,b:p" / "ipv6:[a]:p,..." too, "dns:///name:port"
names every address DNS gives for the name; any other target is one replica."""
import json
import socket
import threading
import time
from typing import List, Optional, Tuple


def _split_host_port(hp: str) -> Tuple[str, str]:
    if hp.startswith("["):
        host, _, rest = hp[1:].partition("]")
        if not rest.startswith(":") or not rest[1:]:
            raise ValueError(f"replica '{hp}' is not host:port")
        return host, rest[1:]
    host, sep, port = hp.rpartition(":")
    if not sep or not host or not port:
        raise ValueError(f"replica '{hp}' is not host:port")
    return host, port


def _resolve(hp: str) -> List[str]:
    host, port = _split_host_port(hp)
    out = set()
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family == socket.AF_INET:
            out.add(f"ipv4:{sockaddr[0]}:{port}")
        elif family == socket.AF_INET6:
            out.add(f"ipv6:[{sockaddr[0]}]:{port}")
    if not out:
        raise ValueError(f"{hp} has no address")
    return sorted(out)


def resolve(target: str) -> Tuple[List[str], str]:
    """(one channel target per replica, the target of a channel balanced over them or "" where
    the target names one)."""
    if target.startswith(("ipv4:", "ipv6:")):
        scheme = target[:5]
        addresses = [scheme + a for a in target[5:].split(",") if a]
        return (addresses, target if len(addresses) > 1 else "") if addresses else ([target], "")
    if target.startswith("dns:"):
        name = target[4:]
        if name.startswith("//"):
            name = name[2:].partition("/")[2]
        addresses = _resolve(name)
        return addresses, (target if len(addresses) > 1 else "")
    if "," in target and not target.startswith("unix:"):
        named = [hp.strip() for hp in target.split(",") if hp.strip()]
        every = [a for hp in named for a in _resolve(hp)]
        if len(named) < 2:
            return named, ""
        v4 = [a[5:] for a in every if a.startswith("ipv4:")]
        v6 = [a[5:] for a in every if a.startswith("ipv6:")]
        balanced = "ipv4:" + ",".join(v4) if len(v4) >= len(v6) else "ipv6:" + ",".join(v6)
        return named, balanced
    return [target], ""


def service_config() -> str:
    """The channels' service config: no retry policy of gRPC's (the client retries stateless
    calls itself, on whichever replica: two layers would multiply their tries), and gRPC's
    retry throttling left at its budget."""
    method = {"name": [{"service": "tensorcompute.v1.TensorService", "method": "Compute"},
                       {"service": "tensorcompute.v1.TensorService", "method": "ListOps"},
                       {"service": "grpc.health.v1.Health", "method": "Check"}]}
    return json.dumps({"methodConfig": [method],
                       "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}})


def channel_options(max_message_bytes: int, retry_buffer: int, keepalive: float,
                    keepalive_timeout: float) -> list:
    """grpcio options every channel of a client takes. Keepalive: a ping every `keepalive`
    seconds, idle or not, and a connection whose ping is not answered within
    `keepalive_timeout` is given up, failing its calls UNAVAILABLE (a frozen server, a host
    gone without closing its connections). Reconnects: a server back on its address is
    connected again within a second; a connect that does not complete in 3 s is given up."""
    options = [("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.max_send_message_length", max_message_bytes),
               ("grpc.enable_retries", 1),
               ("grpc.per_rpc_retry_buffer_size", retry_buffer),
               ("grpc.initial_reconnect_backoff_ms", 100),
               ("grpc.max_reconnect_backoff_ms", 1000),
               ("grpc.min_reconnect_backoff_ms", 3000)]
    if keepalive > 0:
        options += [("grpc.keepalive_time_ms", int(keepalive * 1000)),
                    ("grpc.keepalive_timeout_ms", int(max(0.1, keepalive_timeout) * 1000)),
                    ("grpc.keepalive_permit_without_calls", 1),
                    ("grpc.http2.max_pings_without_data", 0)]
    return options


class Replica:
    """One server of a client's target: a channel of its own, the native transport and the
    region socket connection to it (each made on first use by the client), and how it answered
    lately. A replica that failed a call is passed over for a while (a quarter second, doubling
    to two while it keeps failing) unless no other is left, then tried again."""

    def __init__(self, address: str, channel, stub):
        self.address = address
        self.channel = channel
        self.stub = stub
        self.lock = threading.Lock()
        self.native = None        # NativeClient, made on first use
        self.shm = None           # shm.Shm of the server process now behind the address
        self.no_shm = None        # why regions do not apply here, once known
        self.failures = 0
        self.down_until = 0.0

    def failed(self):
        with self.lock:
            self.failures += 1
            self.down_until = time.monotonic() + min(2.0, 0.25 * 2 ** (self.failures - 1))

    def answered(self):
        if self.failures:
            with self.lock:
                self.failures = 0
                self.down_until = 0.0

    def up(self, now: float) -> bool:
        return now >= self.down_until


def pick(replicas: List[Replica], turn: int, avoid: List[Replica],
         prefer: Optional[Replica] = None) -> Replica:
    """The replica the next try goes to: `prefer` where it is up and not in `avoid`, else the
    `turn`-th of those up and not in `avoid`, else (all tried or down) the one that comes back
    soonest, untried ones first."""
    now = time.monotonic()
    fresh = [r for r in replicas if r not in avoid] or list(replicas)
    up = [r for r in fresh if r.up(now)]
    if prefer is not None and prefer in up:
        return prefer
    if up:
        return up[turn % len(up)]
    return min(fresh, key=lambda r: r.down_until)
