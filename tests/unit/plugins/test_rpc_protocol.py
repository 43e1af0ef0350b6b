"""The RPC client's pure parts: endpoints and protocol compatibility (the wire itself is tested against
a real worker in tests/integration/test_rpc_probe.py)."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleLookupError

from ansible_collections.graviton.llama_rpc.plugins.lookup.rpc_limits import LookupModule
from ansible_collections.graviton.llama_rpc.plugins.module_utils.rpc_protocol import MAX_WORKERS, compatible, parse_endpoint

ROLES = Path(__file__).resolve().parents[3] / "roles"


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


def test_the_worker_limit_is_set_once():
    """The roles check the limit the modules and filters check: rpc_limits returns it, and no role writes the number."""
    lookup = LookupModule()
    lookup._load_name = "graviton.llama_rpc.rpc_limits"  # what the plugin loader sets (ansible-core 2.17 needs it)
    assert lookup.run(["max_workers"]) == [MAX_WORKERS]
    with pytest.raises(AnsibleLookupError, match="unknown limit nope; rpc_limits knows max_workers"):
        lookup.run(["nope"])
    limits = {name: yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())[name]
              for role, name in (("aws_infra", "_aws_infra_max_workers"), ("rpc_master", "_rpc_master_max_workers"),
                                 ("rpc_worker", "_rpc_worker_max_in_cluster"))}
    assert set(limits.values()) == {"{{ query('graviton.llama_rpc.rpc_limits', 'max_workers') | first }}"}, limits
