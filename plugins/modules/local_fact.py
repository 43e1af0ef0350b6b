#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_fact
short_description: Publish a state as an Ansible local fact and read the local facts back, in one module run
version_added: 0.2.0
description:
  - Writes O(content) to C(<fact_path>/<name>.fact) as JSON (the text C(to_nice_json) writes, and a newline),
    mode 0644, creating O(fact_path) (mode 0755) if it is missing; both owned by O(owner) and O(group). A file
    that already holds that text is left as it is.
  - Then reads every local fact under O(fact_path) exactly as M(ansible.builtin.setup) does (its own collector), and
    returns them as the C(ansible_local) fact, so later tasks of the same run see the new state.
  - It does what M(ansible.builtin.file), M(ansible.builtin.copy) and C(setup) with C(filter=ansible_local) do
    together, in one module run instead of four (C(copy) runs C(stat) first). Each module run starts Python on the
    host, which is most of what publishing costs when nothing changed.
  - With O(state=absent) the file is removed instead (the fact is withdrawn), and the facts are read back the same way.
  - In check mode nothing is written and the facts returned are those on the host.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  name:
    description: The local fact's name (C(ansible_local.<name>)); letters, digits and underscores.
    type: str
    required: true
  content:
    description: The state to publish. Required when O(state=present), ignored when O(state=absent).
    type: dict
  state:
    description: Whether the fact is published (V(present)) or withdrawn, its file removed (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  fact_path:
    description: The directory of local facts (the C(fact_path) of M(ansible.builtin.setup)).
    type: path
    default: /etc/ansible/facts.d
  owner:
    description: The owner of the file and of O(fact_path).
    type: str
    default: root
  group:
    description: The group of the file and of O(fact_path).
    type: str
    default: root
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Publish the build (local fact llama_rpc_build)
  graviton.llama_rpc.local_fact:
    name: llama_rpc_build
    content: "{{ llama_build_current }}"

- name: Later tasks read it
  ansible.builtin.debug:
    msg: "{{ ansible_facts.ansible_local.llama_rpc_build.bin_dir }}"

- name: Withdraw it (ansible_local no longer has llama_rpc_tunnel)
  graviton.llama_rpc.local_fact:
    name: llama_rpc_tunnel
    state: absent
"""

RETURN = r"""
path:
  description: The file the fact is kept in.
  returned: always
  type: str
  sample: /etc/ansible/facts.d/llama_rpc_build.fact
ansible_facts:
  description: The facts it sets.
  returned: success
  type: complex
  contains:
    ansible_local:
      description: Every local fact under O(fact_path), as M(ansible.builtin.setup) reads them.
      type: dict
      sample: {"llama_rpc_build": {"bin_dir": "/opt/llama.cpp/b11312-aarch64-0123456789/bin"}}
"""

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.module_utils.facts.system.local import LocalFactCollector

NAME = re.compile(r"[A-Za-z0-9_]+")


def fact_text(content):
    """The text the copy of C({{ content | to_nice_json }}\\n) wrote: the same bytes, so a host published by an
    earlier release is not rewritten."""
    return json.dumps(content, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def read_text(path):
    """The file's text, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomically(module, path, text):
    """Writes text beside path and moves it over path: a reader sees the old fact or the new one, never half."""
    descriptor, temporary = tempfile.mkstemp(prefix=".local_fact.", dir=os.path.dirname(path))
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(to_bytes(text, errors="surrogate_or_strict"))
        module.atomic_move(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def withdraw(module, name, path):
    """Removes the fact's file, if there is one. Returns (changed, text before, text after)."""
    before = read_text(path)
    try:
        if before is not None and not module.check_mode:
            os.unlink(path)
    except OSError as error:
        module.fail_json(msg=f"Could not remove the local fact {name} ({path}): {to_native(error)}. Check that root can "
                             f"write {os.path.dirname(path)}.", path=path)
    return before is not None, before, ""


def publish(module, name, path):
    """Writes the fact's file (and its directory) as O(content) asks. Returns (changed, text before, text after)."""
    directory, owner, group = (module.params[key] for key in ("fact_path", "owner", "group"))
    changed = False
    try:
        if not os.path.isdir(directory):
            changed = True
            if not module.check_mode:
                os.makedirs(directory, 0o755)
        if os.path.isdir(directory):
            changed = module.set_mode_if_different(directory, "0755", changed)
            changed = module.set_owner_if_different(directory, owner, changed)
            changed = module.set_group_if_different(directory, group, changed)
        before, after = read_text(path), fact_text(module.params["content"])
        if before != after:
            changed = True
            if not module.check_mode:
                write_atomically(module, path, after)
        if os.path.exists(path):
            changed = module.set_mode_if_different(path, "0644", changed)
            changed = module.set_owner_if_different(path, owner, changed)
            changed = module.set_group_if_different(path, group, changed)
    except OSError as error:
        module.fail_json(msg=f"Could not publish the local fact {name} in {path}: {to_native(error)}. Check that "
                             f"{directory} is a directory root can write.", path=path)
    return changed, before, after


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            content=dict(type="dict"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            fact_path=dict(type="path", default="/etc/ansible/facts.d"),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
        ),
        required_if=[("state", "present", ["content"])],
        supports_check_mode=True,
    )
    name = module.params["name"]
    if not NAME.fullmatch(name):
        module.fail_json(msg=f"name {name!r} is not a local fact's name: use letters, digits and underscores only "
                             "(it becomes ansible_local.<name>).")
    path = os.path.join(module.params["fact_path"], name + ".fact")
    changed, before, after = (withdraw if module.params["state"] == "absent" else publish)(module, name, path)
    result = dict(changed=changed, path=path, ansible_facts=dict(ansible_local=LocalFactCollector().collect(module=module)["local"]))
    if module._diff:
        result["diff"] = dict(before=before or "", after=after, before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
