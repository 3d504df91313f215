"""Failures the client raises: every one a grpc.RpcError with a code and details, whichever
road the call took (grpcio, the native library, the region socket)."""
import grpc


class ClientError(grpc.RpcError, RuntimeError):
    """A failure shaped like grpcio's errors (code(), details()). It is a RuntimeError too, as
    the region socket's refusals were before."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        return f"{self._code.name}: {self._details}"


def unavailable(details: str) -> ClientError:
    return ClientError(grpc.StatusCode.UNAVAILABLE, details)


def from_os_error(e: OSError, what: str) -> ClientError:
    """A lost or refused local connection (the region socket): the server is not there now."""
    if isinstance(e, TimeoutError):
        return unavailable(f"{what}: no answer in time")
    return unavailable(f"{what}: {e.strerror or e}")
