# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's input rules by the role's name: one function per role (a module of its own beside this one) takes its
settings (the variables as the user set them, and what the role resolved from the host and the inventory) and returns
the refusals, one sentence each, naming the variable and what to write instead; [] when all are good.

A role's pre-flight calls its function through the input_problems filter and fails on the first non-empty answer,
before anything on a host or in AWS changes. What only a host can answer (is this address one of its own, is a port
free, does a file exist on it) stays in the role; the unit tests cover every rule (tests/unit/plugins/module_utils/
input_rules/, one file per role).
"""

from __future__ import annotations

from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.aws_infra import aws_infra, aws_infra_power, aws_infra_teardown
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.bench import bench
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.gateway import gateway
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.llama_build import llama_build
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.monitoring import monitoring, monitoring_exporter
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.rpc_master import rpc_master
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.rpc_tunnel import rpc_tunnel
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.rpc_worker import rpc_worker

ROLES = {"aws_infra": aws_infra, "aws_infra_teardown": aws_infra_teardown, "aws_infra_power": aws_infra_power,
         "llama_build": llama_build, "rpc_tunnel": rpc_tunnel, "rpc_worker": rpc_worker, "rpc_master": rpc_master,
         "gateway": gateway, "bench": bench, "monitoring": monitoring,
         "monitoring_exporter": monitoring_exporter}


def input_problems(settings, role):
    """The refusals of role's rules for settings; KeyError names a setting the caller left out."""
    return ROLES[role](settings)
