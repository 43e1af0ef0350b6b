"""The test bed's hosts reached the way amazon.aws.aws_ec2 reaches this collection's EC2 instances."""

DOCUMENTATION = r"""
name: testbed_ec2_access
short_description: the local cluster's containers, reached as the aws_ec2 inventory reaches EC2 instances
description:
  - Runs after Molecule's own inventory (Molecule writes this configuration as the file C(hosts) beside it).
  - For each host whose container runs, builds what amazon.aws.aws_ec2 gives an instance this collection
    provisioned (C(tags), C(private_ip_address), C(public_ip_address) for the master) and applies the C(compose)
    and C(keyed_groups) of the AWS inventory file to it, with the code aws_ec2 itself uses (Constructable). So the
    connection variables the cluster scenario runs on are the ones AWS users get (the user, become, the master
    reached on its address, the workers through it with ProxyJump).
  - With O(consoles_file), each host also gets the EC2 instance that stands for it at the console stand-in
    (C(instance_id), C(placement.region)), as aws_ec2 gives them. Its console output is the container's log
    (tests/tools/moto_aws.py --consoles), so aws_infra's host_keys reads the host keys through the AWS API as on AWS.
    None while the stand-in is down. The stand-in writes the instances it made to that file; read there, every
    Ansible run of the scenario is spared boto3 and an API call (0.25 CPU-s each, measured).
  - The tags follow the Molecule groups. C(llama_master), C(llama_workers), C(llama_gateway) give the role tag;
    the host's C(cluster_<name>) group gives the cluster tag; a worker's jump tag is the address of its cluster's master.
options:
  plugin:
    description: this plugin
    required: true
    choices: [testbed_ec2_access]
  aws_inventory:
    description: the aws_ec2 inventory file whose compose and keyed_groups apply
    required: true
    type: path
  consoles_file:
    description: the file where the console stand-in lists its instances (consoles.json beside its pid file)
    type: path
"""

import json
import os

from ansible.plugins.inventory import BaseInventoryPlugin, Constructable

ROLE_GROUPS = {"llama_master": "master", "llama_workers": "workers", "llama_gateway": "gateway"}
TAG = "graviton.llama_rpc/"


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "testbed_ec2_access"

    def verify_file(self, path):
        return os.path.basename(path) == "hosts" and super().verify_file(path)

    def parse(self, inventory, loader, path, cache=False):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        aws = self._load_trusted(self.get_option("aws_inventory"))
        for name, instance in self._instances().items():
            for key, value in instance.items():
                inventory.set_variable(name, key, value)
            inventory.set_variable(name, "ansible_connection", "ssh")  # aws_ec2 sets none: Ansible's default, ssh
            self._set_composite_vars(aws.get("compose"), instance, name, strict=False)
            self._add_host_to_keyed_groups(aws.get("keyed_groups"), instance, name, strict=False)

    def _load_trusted(self, path):
        """The AWS inventory file as aws_ec2 reads its own: through the loader, its expressions trusted as templates
        (ansible-core 2.19 and later render no others)."""
        try:
            return self.loader.load_from_file(path, cache="none", trusted_as_template=True)
        except TypeError:  # ansible-core before 2.19: every loaded string is a template
            return self.loader.load_from_file(path, cache=False)

    def _instances(self):
        instances = testbed_instances(self.inventory, self._addresses())
        consoles = console_instances(self.get_option("consoles_file")) if self.get_option("consoles_file") else {}
        for name, instance_id in consoles.get("instances", {}).items():
            if name in instances:
                instances[name].update(instance_id=instance_id, placement={"region": consoles["region"]})
        return instances

    def _addresses(self):
        """{host: its container's address} for the hosts whose container runs."""
        # Here, not at the top: Molecule's venv has docker, the lowest ansible-core's (unit tests only) does not.
        import docker  # pylint: disable=import-outside-toplevel
        running = {container.name: container for container in docker.from_env().containers.list(filters={"status": "running"})}
        return {name: next(iter(running[name].attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
                for name in self.inventory.hosts if name in running}


def console_instances(path):
    """What the console stand-in wrote to path ({"pid", "region", "instances": {host: instance id}}); {} when it is
    not there or the stand-in that wrote it has exited."""
    try:
        with open(path, encoding="utf-8") as listed:
            consoles = json.load(listed)
        os.kill(consoles["pid"], 0)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return consoles


def testbed_instances(inventory, address):
    """{host: the aws_ec2 host variables it would have} for the hosts with an address, from their groups."""
    def groups_of(name):
        return {group.name for group in inventory.hosts[name].get_groups()}

    instances = {}
    for name in address:
        groups = groups_of(name)
        role = next((ROLE_GROUPS[group] for group in sorted(groups) if group in ROLE_GROUPS), None)
        if role is None:
            continue
        tags = {TAG + "role": role, "Name": name}
        cluster = min((group for group in groups if group.startswith("cluster_")), key=len, default=None)
        if cluster:
            tags[TAG + "cluster"] = cluster.removeprefix("cluster_")
        instance = {"tags": tags, "private_ip_address": address[name]}
        if role == "workers":
            masters = [host.name for host in inventory.groups[cluster].get_hosts() if "llama_master" in groups_of(host.name)] if cluster else []
            tags[TAG + "jump"] = address.get(masters[0], "") if masters else ""
        else:
            instance["public_ip_address"] = address[name]  # the address the controller reaches it on
        instances[name] = instance
    return instances
