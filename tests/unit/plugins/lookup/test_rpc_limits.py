"""The rpc_limits lookup: the limits of llama.cpp's RPC backend, set once for the roles, the modules and the filters."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleLookupError

from ansible_collections.graviton.llama_rpc.plugins.lookup.rpc_limits import LookupModule
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS


ROLES = Path(__file__).resolve().parents[4] / "roles"


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
