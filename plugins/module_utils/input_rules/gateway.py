# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gateway's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import os
import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import load_time
from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import whole, number, at_least, in_range, sentences

_KEY = re.compile(r"^\S+$")


def gateway(settings):
    """The gateway's rules. Beside its variables: host, address (gateway_bind_address or the default-route address),
    host_ipv4, masters (the hosts of gateway_master_group), backends (per master: master, name, url), master_keys (each
    master's rpc_master_server_api_key). No key is ever part of a refusal."""
    s, found = settings, []
    if not in_range(s["gateway_port"], 1, 65535):
        found.append("gateway_port=%s: set it from 1 to 65535" % s["gateway_port"])
    found += address_problems([
        {"name": "gateway_bind_address", "value": s["address"], "kind": "address",
         "empty_fix": "%s has no default route to take its address from: set it to one of %s"
                      % (s["host"], ", ".join(s["host_ipv4"]) or "its addresses")}])
    for name, unit in (("gateway_check_interval", " second"), ("gateway_check_timeout", " second"),
                       ("gateway_check_fall", ""), ("gateway_check_rise", ""), ("gateway_request_timeout", " second"),
                       ("gateway_max_connections", ""), ("gateway_tls_self_signed_days", "")):
        if not at_least(s[name], 1):
            found.append("%s=%s: set it to 1%s or more" % (name, s[name], unit))
    certificate, key = s["gateway_tls_certificate"], s["gateway_tls_private_key"]
    if bool(certificate) != bool(key):
        found.append("Give both gateway_tls_certificate and gateway_tls_private_key, or neither (a self-signed certificate)")
    for name, path in (("gateway_tls_certificate", certificate), ("gateway_tls_private_key", key)):
        if path and not os.path.isfile(path):  # on the controller: the role copies them from there
            found.append("%s='%s': no such file on the controller" % (name, path))
    keys = s["gateway_api_keys"]
    if (not isinstance(keys, (list, tuple)) or not keys
            or not all(isinstance(one, (str, int)) and _KEY.match(str(one)) for one in keys)):
        found.append("gateway_api_keys must list the keys clients send (Authorization: Bearer <key>), at least one, each "
                     "without spaces or line breaks. Keep them in Ansible Vault")
    group = s["gateway_master_group"]
    if not s["masters"]:
        found.append("Group '%s' holds no masters: put the clusters' masters in it, or set gateway_master_group to the "
                     "group that holds them" % group)
    for backend in s["backends"]:
        if not backend["url"]:
            found.append("%s has no llama-server: deploy it first (playbooks/deploy.yml) with rpc_master_server_enabled "
                         "true, or take it out of group '%s'" % (backend["master"], group))
    wake = s.get("gateway_wake_timeout", 0)
    if not at_least(wake, 0):
        found.append("gateway_wake_timeout=%s: set it to 0 (no wake) or more seconds" % wake)
    elif whole(wake) > 0:
        unwakeable = [backend["master"] for backend in s["backends"] if backend["url"] and not backend.get("wake")]
        if unwakeable:
            found.append("gateway_wake_timeout wakes stopped clusters through each master's wake socket, which %s "
                         "lack: deploy them with rpc_master_wake_port set (playbooks/deploy.yml), or set "
                         "gateway_wake_timeout: 0" % ", ".join(unwakeable))
        rise = whole(s.get("gateway_check_rise")) or 0
        interval = whole(s.get("gateway_check_interval")) or 0
        for backend in s["backends"]:
            seconds = number(backend.get("start_seconds"))
            if seconds is None:
                continue
            boot = load_time.figure("ec2_start_s") if str(backend.get("wake", "")).startswith("aws:") else 0
            start = boot + seconds + rise * interval
            if whole(wake) < start:
                found.append("gateway_wake_timeout=%s is shorter than the predicted start of %s's cluster: %.0f s (%sits "
                             "load from the workers' caches, %.1f s by the load-time model, then %d health checks %d s "
                             "apart): set it to %d or more" % (wake, backend["master"], start,
                                                               "its instances' start, %.0f s, then " % boot if boot else "",
                                                               seconds, rise, interval, int(start + 0.999)))
    names = [backend["name"] for backend in s["backends"]]
    if len(set(names)) != len(names):
        found.append("Two masters have the same name once characters HAProxy does not take are replaced with _: rename one")
    # The gateway sends every request on with the masters' key: they must share one (never shown).
    master_keys = s["master_keys"]
    if s["masters"] and (not all(master_keys) or len(set(master_keys)) != 1):
        found.append("The masters %s must all have the same non-empty rpc_master_server_api_key: the gateway sends each "
                     "request on with it, to whichever cluster takes it. Set it once for all of them (group_vars of %s) "
                     "and redeploy" % (", ".join(s["masters"]), group))
    return sentences(found)
