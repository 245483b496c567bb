"""rowcall: the Python client of rowcall's public gRPC API (``rowcall.v1``).

::

  your agent ─┐
  rowcall.tools ┴► Client / AsyncClient (session index, retries, hedged reads, leader hints)
                     │  ──gRPC──► any nodes of the cluster
                     └─ watch(): change feed that resumes on another node
  client.verify(id) ─► verify: judged against pinned voter keys and the last checkpoint seen

The four-step loop::

    import rowcall
    with rowcall.Client(["127.0.0.1:9081", "127.0.0.1:9082"]) as client:
        best = client.ask("what time is it").best            # 1. ask
        contract = client.contract(best.key)                 # 2. contract
        ran = client.invoke(best.key)                        # 3. invoke
        client.confirm(ran.receipt_id)                       # 4. confirm
"""

from ._core import Attempted
from ._json import row_input, row_json
from .aio import AsyncClient, Invocation, Watch
from .errors import (
    AddressError,
    ArgumentError,
    Conflict,
    InvalidArgument,
    NoNodes,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    Rejected,
    Rejection,
    RowcallError,
    TooLarge,
    Unauthenticated,
    Unavailable,
)
from .sync import Client, SyncWatch
from .verify import NotYetCovered, Verdict, VerifyError

__all__ = [
    "AddressError",
    "ArgumentError",
    "AsyncClient",
    "Attempted",
    "Client",
    "Conflict",
    "InvalidArgument",
    "Invocation",
    "NoNodes",
    "NotFound",
    "NotYetCovered",
    "OutcomeUnknown",
    "PermissionDenied",
    "Rejected",
    "Rejection",
    "RowcallError",
    "SyncWatch",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "Verdict",
    "VerifyError",
    "Watch",
    "row_input",
    "row_json",
]
