"""The RPC client's pure parts: endpoints and protocol compatibility (the wire itself is tested against
a real worker in tests/integration/test_rpc_probe.py)."""

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import compatible, parse_endpoint


@pytest.mark.parametrize("endpoint, expected", [
    ("10.0.1.11:50052", ("10.0.1.11", 50052)),
    ("worker-1.internal:50052", ("worker-1.internal", 50052)),
    ("[fd00::11]:50052", ("fd00::11", 50052)),
    (" 10.0.1.11:1 ", ("10.0.1.11", 1)),
])
def test_endpoints(endpoint, expected):
    assert parse_endpoint(endpoint) == expected


@pytest.mark.parametrize("endpoint", ["10.0.1.11", ":50052", "10.0.1.11:0", "10.0.1.11:65536", "10.0.1.11:rpc"])
def test_bad_endpoints(endpoint):
    with pytest.raises(ValueError):
        parse_endpoint(endpoint)


@pytest.mark.parametrize("client, server, usable", [
    ("7.0.0", "7.0.0", True),
    ("7.1.0", "7.0.3", True),   # an older minor on the worker is fine
    ("7.0.0", "7.1.0", False),  # a newer minor on the worker is not
    ("7.0.0", "6.9.0", False),  # another major never
    ("8", "8.0.0", True),
])
def test_compatibility(client, server, usable):
    assert compatible(client, server) is usable
