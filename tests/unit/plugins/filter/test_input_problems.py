"""The input_problems filter: a role's input rules from a playbook, and the mistakes of the role's own call named."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems


def test_the_rules_of_the_role_named_give_one_sentence_per_problem():
    found = input_problems({"aws_infra_region": "", "aws_infra_cluster_name": "llama70b"}, "aws_infra_teardown")
    assert found == ["aws_infra_region is empty: set the region of the cluster to delete (for example us-east-1)."]
    assert input_problems({"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}, "aws_infra_teardown") == []


@pytest.mark.parametrize("settings, role, message", [
    ({}, "no_such_role", "no rules for role 'no_such_role'"),
    (["aws_infra_region"], "aws_infra_teardown", "expects the settings as a dict, got 'list'"),
    ({"aws_infra_region": "eu-west-1"}, "aws_infra_teardown", "the role did not pass setting 'aws_infra_cluster_name'"),
])
def test_a_wrong_call_names_what_the_role_got_wrong(settings, role, message):
    with pytest.raises(AnsibleFilterError, match=message):
        input_problems(settings, role)
