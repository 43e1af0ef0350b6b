# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: console_host_keys
short_description: known_hosts lines for a host, from the SSH host keys its console printed at first boot
version_added: 0.1.0
description:
  - cloud-init prints each new host's SSH public host keys to its console, between
    C(-----BEGIN SSH HOST KEY KEYS-----) and C(-----END SSH HOST KEY KEYS-----). On AWS,
    C(aws ec2 get-console-output --instance-id ID --latest --output text) returns that console; it is read over the
    AWS API, not over the network the SSH connection would cross, so the keys it holds can be trusted where a first
    connection's cannot.
  - Returns one C(known_hosts) line per key, under the name ssh will look the host up by (the address Ansible
    connects to, that is the master's public address, or a worker's private address, reached through the master).
  - The last block counts (a console can hold several boots). No block, or a line in it that is not a public key,
    is refused with what to do. Terminal control sequences are not text and are dropped first; on a serial console,
    systemd's boot status moves the cursor between the lines other programs print.
options:
  _input:
    description: The console output, as text.
    type: str
    required: true
  address:
    description: The name or address ssh connects to (C(ansible_host)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Trust the master's host keys, as its console printed them
  ansible.builtin.known_hosts:
    name: "{{ hostvars[item].ansible_host }}"
    key: "{{ key }}"
    path: ~/.ssh/known_hosts
  loop: "{{ console_text | graviton.llama_rpc.console_host_keys(hostvars[item].ansible_host) }}"
  loop_control:
    loop_var: key
"""

RETURN = r"""
_value:
  description: C(known_hosts) lines, C(<address> <key type> <base64 key>).
  type: list
  elements: str
"""

import base64
import binascii
import re

from ansible.errors import AnsibleFilterError

BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
END = "-----END SSH HOST KEY KEYS-----"
# ECMA-48's control sequences (ESC [ ... final byte) and its two-byte escapes (ESC M, the reverse line feed systemd's
# status animation sends, among them).
TERMINAL_CONTROL = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")


def console_host_keys(console, address):
    if not isinstance(address, str) or not address or any(c.isspace() or c == "," for c in address):
        raise AnsibleFilterError(f"console_host_keys: address {address!r} is not one host name or address")
    lines = [line.strip() for line in TERMINAL_CONTROL.sub("", str(console)).replace("\r", "\n").split("\n")]
    if BEGIN not in lines or END not in lines[lines.index(BEGIN):]:
        raise AnsibleFilterError(
            f"console_host_keys: no SSH host keys for {address} in the console output (no {BEGIN} ... {END} block). "
            "cloud-init prints them once the host has booted, and EC2 shows a console some minutes late: read it "
            "again later (aws ec2 get-console-output --latest).")
    start = len(lines) - 1 - lines[::-1].index(BEGIN)
    block = lines[start + 1:lines.index(END, start)]
    known = []
    for line in filter(None, block):
        fields = line.split()
        if len(fields) < 2 or fields[0] not in KEY_TYPES or not _is_base64(fields[1]):
            raise AnsibleFilterError(f"console_host_keys: {line!r} in {address}'s host key block is not an SSH public "
                                     f"key ({', '.join(KEY_TYPES)}); the console output is damaged or not cloud-init's")
        known.append(f"{address} {fields[0]} {fields[1]}")
    if not known:
        raise AnsibleFilterError(f"console_host_keys: {address}'s host key block in the console output is empty")
    return known


def _is_base64(text):
    try:
        return bool(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return False


class FilterModule:
    def filters(self):
        return {"console_host_keys": console_host_keys}
