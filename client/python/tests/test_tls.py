"""A node whose gRPC listener serves the operator's certificates (TLS only): the client
reaches it with the CA file and only with it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import ADMIN_KEY, Cluster

import rowcall


@pytest.fixture(scope="module")
def secured() -> Iterator[Cluster]:
    c = Cluster(n=1, tls=True).start()
    try:
        yield c
    finally:
        c.stop()


def test_tls_with_the_ca_file(secured: Cluster) -> None:
    assert secured.ca is not None
    address = secured.node(1).grpc_addr
    with rowcall.Client([address], credential=ADMIN_KEY, tls_ca=str(secured.ca)) as client:
        put = client.put(
            {
                "key": "PY_TLS",
                "type": "static",
                "auth": "public",
                "content": "# WHAT: tls check\n\nsecure",
            }
        )
        assert client.invoke("PY_TLS").result == "secure"
        assert client.get("PY_TLS").version == put.index
    # https without a CA is refused before anything is sent; plain text gets no answer.
    with pytest.raises(rowcall.AddressError):
        rowcall.Client([f"https://{address}"])
    with rowcall.Client([address], deadline=2) as plain, pytest.raises(rowcall.Unavailable):
        plain.ask("tls check")
