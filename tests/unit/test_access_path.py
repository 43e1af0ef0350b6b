"""The connection variables AWS users get from inventories/aws/aws_ec2.yml, and the ones the cluster scenario runs on
(tests/tools/inventory_plugins/testbed_ec2_access.py applies the same compose to the containers): rendered here for
a master and a worker, with the code amazon.aws.aws_ec2 uses (Constructable), on this ansible-core."""

import importlib.util
from pathlib import Path

import jinja2
import jinja2.nodes
import pytest
import yaml
from packaging.specifiers import SpecifierSet
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable
from ansible.template import Templar

ROOT = Path(__file__).resolve().parents[2]
AWS_INVENTORY = ROOT / "inventories" / "aws" / "aws_ec2.yml"
MOLECULE = ROOT / "molecule" / "cluster" / "molecule.yml"
MASTER_PUBLIC, MASTER_PRIVATE, WORKER_PRIVATE = "203.0.113.10", "10.0.1.10", "10.0.1.11"
# What an AWS user's Ansible must connect with: the image's user, sudo, the master on its public address, a worker
# on its private one through the master.
MASTER_EXPECTED = {"ansible_host": MASTER_PUBLIC, "ansible_user": "ubuntu", "ansible_become": True, "ansible_ssh_common_args": ""}
WORKER_EXPECTED = {"ansible_host": WORKER_PRIVATE, "ansible_user": "ubuntu", "ansible_become": True,
                   "ansible_ssh_common_args": f"-o ProxyJump=ubuntu@{MASTER_PUBLIC}"}
CONNECTION = sorted(MASTER_EXPECTED)


def load_testbed_plugin():
    spec = importlib.util.spec_from_file_location(
        "testbed_ec2_access", ROOT / "tests" / "tools" / "inventory_plugins" / "testbed_ec2_access.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Composer(BaseInventoryPlugin, Constructable):
    """Constructable as aws_ec2 runs it: the inventory file's expressions, trusted as templates, strict off."""
    NAME = "composer"

    def __init__(self, inventory):
        super().__init__()
        self.inventory, self.loader = inventory, DataLoader()
        self.templar = Templar(loader=self.loader)

    def aws_config(self):
        try:
            return self.loader.load_from_file(str(AWS_INVENTORY), cache="none", trusted_as_template=True)
        except TypeError:  # ansible-core before 2.19
            return self.loader.load_from_file(str(AWS_INVENTORY), cache=False)

    def compose(self, name, instance):
        self.inventory.add_host(name)
        self._set_composite_vars(self.aws_config()["compose"], instance, name, strict=False)
        return {key: self.inventory.get_host(name).vars.get(key) for key in CONNECTION}


def ec2_instance(role, private, public=None, jump=None):
    """The host variables aws_ec2 gives one of this collection's instances (the parts the compose reads)."""
    tags = {"graviton.llama_rpc/role": role, "graviton.llama_rpc/cluster": "demo", "managed-by": "graviton.llama_rpc"}
    if jump:
        tags["graviton.llama_rpc/jump"] = jump
    instance = {"tags": tags, "private_ip_address": private}
    if public:
        instance["public_ip_address"] = public
    return instance


def test_the_aws_inventory_connects_as_the_image_user_with_sudo_and_the_workers_through_the_master():
    composer = Composer(InventoryData())
    assert composer.compose("master", ec2_instance("master", MASTER_PRIVATE, MASTER_PUBLIC)) == MASTER_EXPECTED
    assert composer.compose("worker", ec2_instance("workers", WORKER_PRIVATE, jump=MASTER_PUBLIC)) == WORKER_EXPECTED


def test_the_aws_inventory_reads_the_tags_every_admitted_amazon_aws_sets():
    """aws_ec2 sets `tags` through amazon.aws 11 (deprecated there; 12 may drop it) and `ec2_tags` from 11.2 on: the
    inventory reads one that every amazon.aws galaxy.yml admits sets (docs/operations.md, Troubleshooting)."""
    admitted = SpecifierSet(yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]["amazon.aws"])
    config = yaml.safe_load(AWS_INVENTORY.read_text())
    expressions = [*config["compose"].values(), *(group["key"] for group in config["keyed_groups"])]
    parser = jinja2.Environment()  # the names each expression reads, from its syntax tree
    read = {name.name for expression in expressions for name in parser.parse("{{ %s }}" % expression).find_all(jinja2.nodes.Name)}
    assert read & {"tags", "ec2_tags"}, f"the inventory reads no tag: {sorted(read)}"
    assert not ("tags" in read and admitted.contains("12.0.0")), f"galaxy.yml admits amazon.aws {admitted}: read ec2_tags"
    assert not ("ec2_tags" in read and admitted.contains("11.1.0")), f"galaxy.yml admits amazon.aws {admitted}: ec2_tags is from 11.2"


def test_every_compose_value_is_an_expression():
    """A YAML true, number or list in compose is not evaluated on ansible-core 2.19+: it is dropped, silently."""
    compose = yaml.safe_load(AWS_INVENTORY.read_text())["compose"]
    assert all(isinstance(expression, str) for expression in compose.values()), compose


@pytest.fixture(name="scenario_inventory")
def fixture_scenario_inventory():
    """The cluster scenario's groups (molecule.yml), as Molecule's inventory holds them, without containers."""
    inventory = InventoryData()
    for platform in yaml.safe_load(MOLECULE.read_text())["platforms"]:
        inventory.add_host(platform["name"])
        for group in platform["groups"]:
            inventory.add_group(group)
            inventory.add_child(group, platform["name"])
    return inventory


def test_the_cluster_scenario_gets_the_same_variables_from_the_same_expressions(scenario_inventory):
    """The test bed's plugin turns each container into the instance aws_ec2 would give; the compose does the rest. A
    master with one address (public and private alike, as the controller reaches it) and a worker of its cluster."""
    module = load_testbed_plugin()
    address = {"llama-master": MASTER_PUBLIC, "llama-worker-1": WORKER_PRIVATE, "llama-gateway": "10.0.1.20"}
    instances = module.testbed_instances(scenario_inventory, address)
    assert instances["llama-worker-1"]["tags"]["graviton.llama_rpc/jump"] == MASTER_PUBLIC
    assert instances["llama-worker-1"]["tags"]["graviton.llama_rpc/cluster"] == "a"
    composer = Composer(scenario_inventory)
    assert composer.compose("llama-master", instances["llama-master"]) == MASTER_EXPECTED
    assert composer.compose("llama-worker-1", instances["llama-worker-1"]) == WORKER_EXPECTED
    # The gateway, not an instance aws_infra makes, is reached directly as the same user.
    assert composer.compose("llama-gateway", instances["llama-gateway"]) == dict(MASTER_EXPECTED, ansible_host="10.0.1.20")


def test_the_scenario_uses_the_aws_inventory_and_checks_host_keys():
    scenario = yaml.safe_load(MOLECULE.read_text())
    assert scenario["provisioner"]["inventory"]["hosts"]["aws_inventory"].endswith("inventories/aws/aws_ec2.yml")
    ssh_args = scenario["provisioner"]["config_options"]["ssh_connection"]["ssh_args"]
    assert "tests/bed/ssh_config" in ssh_args and "StrictHostKeyChecking=no" not in ssh_args
    assert "StrictHostKeyChecking yes" in (ROOT / "tests" / "bed" / "ssh_config").read_text()
