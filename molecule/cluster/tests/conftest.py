"""Lets testinfra reach the scenario's hosts the way the playbooks do: over SSH as `ubuntu` with sudo, the workers
through their master.

testinfra reads each host's connection from `ansible-inventory --list`, which prints a string Ansible does not trust
as a template as {"__ansible_unsafe": "..."}; an inventory plugin's compose makes exactly such strings (here, as from
aws_ec2 on AWS, every connection variable). testinfra 10.2 takes that connection for one it cannot handle and runs the
`ansible` program for every command: 2.3 s each, against 0.3 s over ssh, measured on this scenario's master. So the
inventory is read back here as Ansible's own decoder reads it, the wrapped strings as the strings they stand for.
"""

import os
import sys

from testinfra.utils import ansible_runner

sys.path.insert(0, os.environ["MOLECULE_PROJECT_DIRECTORY"])
from tests.tools.ansible_inventory import unwrapped  # noqa: E402  pylint: disable=wrong-import-position

_read_inventory = ansible_runner.get_ansible_inventory


_inventories = {}


def _read_inventory_unwrapped(config, inventory_file):
    """Read once per verify and inventory file: every test module's runner and every host's backend read the same
    inventory, which no test changes (the configuration is this verify's one Ansible configuration)."""
    if inventory_file not in _inventories:
        _inventories[inventory_file] = unwrapped(_read_inventory(config, inventory_file))
    return _inventories[inventory_file]


ansible_runner.get_ansible_inventory = _read_inventory_unwrapped


def pytest_sessionstart(session):  # pylint: disable=unused-argument
    """make test starts its integration tests when this verify starts, on the core it leaves idle (tests/run.sh)."""
    started = os.environ.get("LLAMA_RPC_VERIFY_STARTED")
    if started:
        with open(started, "a", encoding="utf-8"):
            pass
