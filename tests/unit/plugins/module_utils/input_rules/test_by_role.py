"""What holds for every role's input rules (module_utils/input_rules/by_role.py): an unknown role or a setting the
role did not pass is named, the argument specs refuse by name before any rule runs, and every port takes 1 to 65535."""

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems
from tests.unit.plugins.module_utils.input_rules.rules import ROOT, defaults, refusals
from tests.unit.plugins.module_utils.input_rules.test_aws_infra import AWS
from tests.unit.plugins.module_utils.input_rules.test_gateway import GATEWAY
from tests.unit.plugins.module_utils.input_rules.test_rpc_master import MASTER
from tests.unit.plugins.module_utils.input_rules.test_rpc_tunnel import TUNNEL_HOST
from tests.unit.plugins.module_utils.input_rules.test_rpc_worker import WORKER


def test_unknown_role_and_missing_setting_are_named():
    with pytest.raises(AnsibleFilterError, match="no rules for role 'nope'"):
        input_problems({}, "nope")
    with pytest.raises(AnsibleFilterError, match="the role did not pass setting 'host'"):
        input_problems(defaults("rpc_worker"), "rpc_worker")


# --- the argument specs: what they refuse, before any rule here runs -------------------------------------------------
@pytest.mark.parametrize("role, settings, message", [
    ("llama_build", {"llama_build_source": "svn"}, "llama_build_source must be one of: git, archive"),
    ("rpc_worker", {"rpc_worker_port": "http"}, "rpc_worker_port"),
    ("rpc_master", {"rpc_master_server_parallel": "four"}, "rpc_master_server_parallel"),
])
def test_the_argument_spec_refuses_by_name(role, settings, message):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    result = ArgumentSpecValidator(spec).validate(settings)
    assert any(message in error for error in result.error_messages), result.error_messages


# --- every port, at its bounds ------------------------------------------------------------------------------------
PORTS = [("rpc_worker", WORKER, "rpc_worker_port"), ("gateway", GATEWAY, "gateway_port"),
         ("rpc_master", MASTER, "rpc_master_server_port"), ("rpc_tunnel", TUNNEL_HOST, "rpc_tunnel_port"),
         ("aws_infra", AWS, "aws_infra_rpc_port"), ("aws_infra", AWS, "aws_infra_server_port")]


@pytest.mark.parametrize("role, context, setting", PORTS, ids=[setting for _role, _context, setting in PORTS])
def test_every_port_takes_1_to_65535_and_nothing_beyond(role, context, setting):
    for port in (1, 65535):
        assert refusals(role, context, {setting: port}) == [], (setting, port)
    for port in (0, 65536):
        found = " ".join(refusals(role, context, {setting: port}))
        assert f"{setting}={port}" in found and "65535" in found, (setting, port, found)
