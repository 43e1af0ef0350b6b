"""The split_endpoint filter: a worker endpoint's address and port, parsed by the RPC client's parser."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.split_endpoint import split_endpoint


@pytest.mark.parametrize("endpoint, parts", [
    ("10.0.1.11:50052", {"host": "10.0.1.11", "port": 50052}),
    ("[fd00::11]:50099", {"host": "fd00::11", "port": 50099}),
])
def test_split_endpoint(endpoint, parts):
    assert split_endpoint(endpoint) == parts


@pytest.mark.parametrize("endpoint, message", [
    ("10.0.1.11", "is not host:port"),
    ("10.0.1.11:0", "the port must be a number from 1 to 65535"),
    (None, "expects an endpoint"),
])
def test_split_endpoint_refuses_what_is_no_endpoint(endpoint, message):
    with pytest.raises(AnsibleFilterError, match=message):
        split_endpoint(endpoint)
