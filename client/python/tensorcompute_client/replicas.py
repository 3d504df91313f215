"""Several servers behind one client target, as the C++ client reads them (client/replicas.h):
"host:port,host:port" lists replicas, "ipv4:a:p,b:p" / "ipv6:[a]:p,..." too, "dns:///name:port"
names every address DNS gives for the name; any other target is one replica."""
import json
import socket
from typing import List, Tuple


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


def service_config(attempts: int, balanced: bool) -> str:
    """Compute, ListOps and health checks retried on UNAVAILABLE up to `attempts` tries in all
    (gRPC caps it at 5), within gRPC's retry throttling; `balanced`: also round_robin over the
    replicas that report SERVING."""
    attempts = max(1, min(5, attempts))
    method = {"name": [{"service": "tensorcompute.v1.TensorService", "method": "Compute"},
                       {"service": "tensorcompute.v1.TensorService", "method": "ListOps"},
                       {"service": "grpc.health.v1.Health", "method": "Check"}]}
    if attempts > 1:
        method["retryPolicy"] = {"maxAttempts": attempts, "initialBackoff": "0.1s",
                                 "maxBackoff": "0.5s", "backoffMultiplier": 2,
                                 "retryableStatusCodes": ["UNAVAILABLE"]}
    config = {"methodConfig": [method],
              "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}
    if balanced:
        config["loadBalancingConfig"] = [{"round_robin": {}}]
        config["healthCheckConfig"] = {"serviceName": ""}
    return json.dumps(config)
