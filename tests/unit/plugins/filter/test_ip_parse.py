"""The ip_parse filter: an address or network parsed into the forms the roles use."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.ip_parse import ip_parse
from jinja2.runtime import Undefined


@pytest.mark.parametrize("value, expected", [
    ("10.0.0.5", {"text": "10.0.0.5", "version": 4, "network": False, "unspecified": False, "loopback": False,
                  "url_host": "10.0.0.5", "cidr": "10.0.0.5/32"}),
    ("fd00::0005", {"text": "fd00::5", "version": 6, "network": False, "unspecified": False, "loopback": False,
                    "url_host": "[fd00::5]", "cidr": "fd00::5/128"}),
    ("0.0.0.0", {"text": "0.0.0.0", "version": 4, "network": False, "unspecified": True, "loopback": False,
                 "url_host": "0.0.0.0", "cidr": "0.0.0.0/32"}),
    ("::1", {"text": "::1", "version": 6, "network": False, "unspecified": False, "loopback": True, "url_host": "[::1]", "cidr": "::1/128"}),
    ("10.1.0.0/16", {"text": "10.1.0.0/16", "version": 4, "network": True, "unspecified": False, "loopback": False,
                     "url_host": "10.1.0.0/16", "cidr": "10.1.0.0/16"}),
    ("10.1.0.9/32", {"text": "10.1.0.9/32", "version": 4, "network": False, "unspecified": False, "loopback": False,
                     "url_host": "10.1.0.9/32", "cidr": "10.1.0.9/32"}),
])
def test_ip_parse(value, expected):
    assert ip_parse(value) == expected


@pytest.mark.parametrize("value", ["10.0.0.5/8", "example.org", 5, ""])
def test_ip_parse_refuses_what_is_no_address(value):
    with pytest.raises(AnsibleFilterError):
        ip_parse(value)


def test_ip_parse_leaves_a_missing_variable_to_ansible():
    """ansible-core 2.17 and 2.18 hand a filter the Undefined of a missing variable: it stays undefined, so Ansible's
    error names the variable instead of the filter complaining about its type."""
    missing = Undefined(name="rpc_worker_bind_address")
    assert ip_parse(missing) is missing
