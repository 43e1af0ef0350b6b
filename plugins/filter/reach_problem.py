# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: reach_problem
short_description: What stops Ansible from working on a host as root, and what to change, from a first command's result
version_added: 0.1.0
description:
  - Takes the registered result of C(id -u) run on the host with the play's connection and become (with
    C(ignore_unreachable) and C(ignore_errors)), and returns an empty string when it ran as root, else one sentence
    that names the host and what to fix.
  - Reads ssh's own words in the result. A host key that is not the one in known_hosts; a key refused, by the host or
    by the jump host (the master, for workers reached through it); sudo that asks for a password; a connection
    without become as a user who is not root. Anything else is quoted as it came.
options:
  _input:
    description: The registered result.
    type: dict
    required: true
  host:
    description: C(inventory_hostname).
    type: str
    required: true
  address:
    description: The address ssh connects to (C(ansible_host)).
    type: str
    required: true
  user:
    description: The user Ansible connects as (C(ansible_user)), empty if not set.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Stop before any change when a host cannot be worked on as root
  ansible.builtin.fail:
    msg: "{{ reach | graviton.llama_rpc.reach_problem(inventory_hostname, ansible_host | default(inventory_hostname)) }}"
  when: reach | graviton.llama_rpc.reach_problem(inventory_hostname, ansible_host | default(inventory_hostname)) | length > 0
"""

RETURN = r"""
_value:
  description: The problem and its fix, or an empty string.
  type: str
"""

import re

HOST_KEYS = "docs/security.md, 'Reaching the hosts'"
# "ubuntu@10.0.1.5: Permission denied (publickey)." names whom the key was offered to.
DENIED = re.compile(r"(?:(\S+)@)?(\[?[0-9A-Za-z.:_-]+\]?): Permission denied \(([^)]*)\)")
CHANGED = re.compile(r"(?:key for|host key for) (\S+) has changed", re.I)


def reach_problem(result, host, address, user=""):
    result = result or {}
    text = " ".join(str(result.get(key) or "") for key in ("msg", "module_stderr", "module_stdout", "stderr"))
    who = f"{host} ({address})"
    as_user = user or "the connecting user"
    if result.get("unreachable"):
        changed = CHANGED.search(text)
        if changed or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text:
            key_of = changed.group(1).strip("[]") if changed else address
            whose = "its" if key_of == address else f"the jump host {key_of}'s"
            return (f"{who}: {whose} SSH host key is not the one known_hosts holds, so ssh refused to connect. If the "
                    f"instance was replaced or rebuilt, remove the old key (ssh-keygen -R {key_of}): the next run takes "
                    f"the new one from its console ({HOST_KEYS}). If it was not, or its key was just taken from its "
                    f"console, do not connect: something else answers on {key_of}. ssh said: {_last_words(text)}")
        denied = DENIED.search(text)
        if denied:
            denied_at = denied.group(2).strip("[]")
            whom = (f"{who} refused" if denied_at in (address, host)
                    else f"{who} is reached through the jump host {denied_at}, which refused")
            return (f"{whom} the SSH key offered for {denied.group(1) or as_user} ({denied.group(3)}). Use the private "
                    f"key of the instances' key pair: --private-key or ansible_ssh_private_key_file for the host, and for "
                    f"a jump host an IdentityFile in your ssh configuration or ssh-agent (ssh does not hand -i on to "
                    f"ProxyJump). ssh said: {_last_words(text)}")
        return f"{who} cannot be reached: {_last_words(text)}"
    if result.get("failed"):
        lowered = text.lower()
        if "password" in lowered and ("sudo" in lowered or "become" in lowered):
            return (f"{who}: sudo asks {as_user} for a password. Give it (--ask-become-pass, or ansible_become_password "
                    f"from Ansible Vault), or let {as_user} use sudo without one, as Ubuntu's cloud image does "
                    f"(/etc/sudoers.d/90-cloud-init-users).")
        return f"{who}: a first command failed: {_last_words(text)}"
    uid = str(result.get("stdout", "")).strip()
    if uid != "0":
        return (f"{who}: connected as {as_user} (uid {uid or '?'}), not as root, and "
                f"without become. Set ansible_become: true ({as_user} needs sudo), or connect as root.")
    return ""


def _last_words(text):
    """ssh's last lines, which say what went wrong (its warnings banner comes first)."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    return " ".join(lines[-3:])[-600:]


class FilterModule:
    def filters(self):
        return {"reach_problem": reach_problem}
