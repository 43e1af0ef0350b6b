"""module_utils/network/addresses.py, what every role's address and network inputs go through (input_rules.py): they are
parsed (ipaddress), and each refusal names the variable and the fix."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import InputProblem, problems as address_problems


ADMIN = {"name": "aws_infra_admin_cidr", "kind": "network", "version": 4, "version_reason": "the VPC has IPv4 only"}

VPC = {"name": "vpc", "value": "10.42.0.0/16", "kind": "network", "prefix": [16, 28], "prefix_reason": "AWS: /16 to /28"}


def problem(spec, value):
    found = address_problems([dict(spec, value=value)])
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("value, expected", [
    # the inputs that a pattern let through, and that amazon.aws then rewrote into another network
    ("300.1.2.3/32", "Octet 300 (> 255) not permitted"),
    ("198.51.100.7/33", "an IPv4 prefix length is 0 to 32"),
    ("198.51.100.7/24", "has host bits set (AWS and nftables would quietly widen it to 198.51.100.0/24): for this address "
                        "alone write 198.51.100.7/32, for the whole network 198.51.100.0/24"),
    ("198.51.100.7", "has no prefix length: for this address alone write 198.51.100.7/32"),
    ("10.0.0.01/32", "Leading zeros are not permitted"),
    ("198.51.100.0/255.255.255.0", "write the prefix length as a number"),
    ("my-office", "Expected 4 octets"),
    ("", "aws_infra_admin_cidr is empty"),
    ("2001:db8::/64", "is IPv6; the VPC has IPv4 only"),
])
def test_a_bad_network_is_refused_by_name_with_the_fix(value, expected):
    message = problem(ADMIN, value)
    assert message.startswith("aws_infra_admin_cidr") and expected in message, message


@pytest.mark.parametrize("value", ["198.51.100.7/32", "0.0.0.0/0", " 203.0.113.0/24 ", "10.0.0.0/8"])
def test_a_good_network_passes(value):
    assert address_problems([dict(ADMIN, value=value)]) == []


def test_ipv6_networks_are_parsed_too():
    spec = {"name": "sources", "kind": "network"}
    assert address_problems([dict(spec, value="2001:db8::/64"), dict(spec, value="fd00::/8")]) == []
    assert "has host bits set" in problem(spec, "2001:db8::1/64")
    assert "an IPv6 prefix length is 0 to 128" in problem(spec, "2001:db8::/129")
    assert "sources='2001:db8:::1/64' is not an IP network" in problem(spec, "2001:db8:::1/64")


def test_prefix_within_and_disjoint_for_a_vpc_and_its_subnets():
    subnet = {"kind": "network", "within": "vpc", "prefix": [16, 28]}
    good = [VPC, dict(subnet, name="public", value="10.42.0.0/24"),
            dict(subnet, name="private", value="10.42.1.0/24", disjoint=["public"])]
    assert address_problems(good) == []
    assert address_problems([dict(VPC, value="10.0.0.0/8")]) == ["vpc='10.0.0.0/8': AWS: /16 to /28."]
    outside = [VPC, dict(subnet, name="public", value="10.43.0.0/24")]
    assert address_problems(outside) == ["public=10.43.0.0/24 is not inside vpc=10.42.0.0/16: choose a block inside it."]
    overlapping = [VPC, dict(subnet, name="public", value="10.42.0.0/23"),
                   dict(subnet, name="private", value="10.42.1.0/24", disjoint=["public"])]
    assert address_problems(overlapping) == ["private=10.42.1.0/24 overlaps public=10.42.0.0/23: give each its own block."]


def test_only_the_wrong_inputs_are_named_in_the_order_given():
    specs = [dict(ADMIN, value="198.51.100.7/32"), dict(VPC, value="10.42.0.1/16"),
             {"name": "bind", "kind": "address", "value": "10.0.0.5"}, {"name": "other", "kind": "address", "value": "x"}]
    found = address_problems(specs)
    assert [message.split("=")[0] for message in found] == ["vpc", "other"], found
    # a subnet of a VPC that is itself wrong is not blamed for it
    assert len(address_problems([dict(VPC, value="10.42.0.1/16"),
                                 {"name": "sub", "kind": "network", "value": "10.42.0.0/24", "within": "vpc"}])) == 1


@pytest.mark.parametrize("value, expected", [
    ("10.0.0.5/24", "is a network (it has a prefix length), not one address: write 10.0.0.5"),
    ("worker-1.internal", "Expected 4 octets"),
    ("10.0.0.256", "Octet 256 (> 255)"),
    ("fd00::zz", "fd00::zz"),
])
def test_an_address_must_be_one_address(value, expected):
    message = problem({"name": "rpc_worker_bind_address", "kind": "address"}, value)
    assert message.startswith("rpc_worker_bind_address=") and "is not an IP address" in message and expected in message


def test_sources_take_addresses_and_networks_and_name_the_bad_entry():
    spec = {"name": "rpc_worker_allowed_sources", "kind": "sources"}
    assert address_problems([dict(spec, value=["10.0.0.5", "10.1.0.0/16", "fd00::5", "fd00:1::/64"])]) == []
    assert address_problems([dict(spec, value=[])]) == []
    assert "entry '10.1.0.1/16'" in problem(spec, ["10.0.0.5", "10.1.0.1/16"])
    assert "must be a list" in problem(spec, "10.0.0.5")


def test_private_only_refuses_a_public_entry_with_the_reason():
    spec = {"name": "aws_infra_server_allowed_sources", "kind": "sources", "version": 4, "private": True,
            "private_reason": "admit private networks only."}
    assert address_problems([dict(spec, value=["10.42.0.0/16", "192.168.1.7", "172.16.0.0/12"])]) == []
    assert address_problems([dict(spec, value=["10.42.0.0/16", "52.94.0.0/16"])]) == [
        "aws_infra_server_allowed_sources entry '52.94.0.0/16' is public; admit private networks only."]
    assert address_problems([dict(spec, value=["0.0.0.0/0"])]) == [
        "aws_infra_server_allowed_sources entry '0.0.0.0/0' is public; admit private networks only."]


def test_a_spec_of_an_unknown_kind_is_a_programming_error():
    with pytest.raises(InputProblem, match="use one of address, network, sources"):
        address_problems([{"name": "x", "kind": "hostname", "value": "a"}])
