"""Python client for tensorcompute: NumPy arrays (and PyTorch tensors) in and out.

    from tensorcompute_client import Client
    c = Client("127.0.0.1:50051")
    y = c.compute("add", x.T, np.broadcast_to(b, x.T.shape), alpha=2.0)

A non-contiguous array (a transpose, a slice with steps, negative steps, np.broadcast_to) is
sent as the span of memory its elements occupy plus its strides and offset: it is never made
contiguous first. Inputs too large for one message go through ComputeStream in chunks.
"""
from .client import Client, OutputPlan, Resident, from_tensor, to_tensor
from .errors import ClientError
from .lazy import RemoteArray

__all__ = ["Client", "ClientError", "OutputPlan", "RemoteArray", "Resident", "from_tensor",
           "to_tensor"]
