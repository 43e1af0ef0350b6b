#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_releases
short_description: The models kept on the master, the one a rollback asks for, and the removal of the others
version_added: 0.2.0
description:
  - Runs on the master. M(graviton.llama_rpc.model_fetch) keeps each downloaded model as a release, a directory of its
    own in O(models_dir) that is never written again. This module lists them, finds the model O(name) asks for (for a
    rollback, a release, a model path that was served, or C(previous)), and with O(prune) removes the releases that are
    neither served (the first of O(history)) nor among the O(keep) served before it, and what fetches cut short left.
  - With O(place), it moves a release that M(graviton.llama_rpc.model_fetch) left staged (verified, C(place=false))
    into place, in one step, once the set is planned.
  - Finding a model reads no model byte. Its files are checked against their checksums by
    M(graviton.llama_rpc.model_fetch), which reads none either while they are as they were verified.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
  - graviton.llama_rpc.model_releases
options:
  name:
    description: A model to find (C(rpc_master_model_release)), a release's name, a model path that was served, or
      C(previous). Empty finds none.
    type: str
    default: ""
  prune:
    description: Remove the releases not kept, and what fetches cut short left in C(.incoming).
    type: bool
    default: false
  place:
    description: The name of a staged release to move into place (nothing when it is placed already). Empty places none.
    type: str
    default: ""
  state_dir:
    description:
      - The fetches' state directory, whose lock tells a fetch under way (its place of work stays), and whose record of
        verified files follows a placed release.
    type: path
    default: /var/lib/llama-rpc-master/fetch
attributes:
  check_mode:
    support: full
    details: Reports what it would remove or place.
"""

EXAMPLES = r"""
- name: Find the model served before the current one
  graviton.llama_rpc.model_releases:
    history: "{{ ansible_local.llama_rpc_master.releases }}"
    name: previous
  register: asked

- name: Remove the releases beyond the one served and the one before it
  graviton.llama_rpc.model_releases:
    history: "{{ ansible_local.llama_rpc_master.releases }}"
    keep: 1
    prune: true
"""

RETURN = r"""
releases:
  description: The releases on the master, each C(name), C(bytes) (its files, each counted once), C(fetched_at) (epoch
    seconds) and C(state) (C(served), C(kept), C(other)), after any removal.
  returned: always
  type: list
  elements: dict
model:
  description: The model O(name) asks for, as the filter M(graviton.llama_rpc.model_parts) gives a model on the master
    (its files used where they are, with their checksums); none when O(name) is empty.
  returned: always
  type: dict
entry:
  description: The entry of O(history) (or the release) O(name) resolved to.
  returned: when O(name) is set
  type: dict
placed:
  description: Whether O(place) moved a staged release into place (or would, in check mode).
  returned: always
  type: bool
removed:
  description: The releases (and C(.incoming) leftovers, as C(.incoming/NAME)) removed, or to be removed in check mode.
  returned: always
  type: list
  elements: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_releases, model_source


def main():
    module = AnsibleModule(
        argument_spec=dict(
            models_dir=dict(type="path", default="/var/lib/llama-models"),
            history=dict(type="list", elements="dict", default=[]),
            keep=dict(type="int", default=1),
            name=dict(type="str", default=""),
            prune=dict(type="bool", default=False),
            place=dict(type="str", default=""),
            state_dir=dict(type="path", default="/var/lib/llama-rpc-master/fetch"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["keep"] < 0:
        module.fail_json(msg="keep must be 0 or more (rpc_master_models_kept)")
    models_dir, history = params["models_dir"], params["history"]
    result = dict(changed=False, model=None, removed=[], placed=False)

    if params["place"] and model_releases.read_manifest(model_releases.staged_dir(models_dir, params["place"])) is not None:
        result.update(placed=True, changed=True)
        if not module.check_mode:
            lock, holder = model_releases.fetch_lock(params["state_dir"], 60)
            if lock is None:
                module.fail_json(msg="another model fetch on the master (pid %s) holds its lock: run again once it ends" % holder,
                                 **result)
            try:
                record = model_releases.load_record(params["state_dir"])
                model_releases.place(models_dir, params["place"], record)
                model_releases.save_record(params["state_dir"], record)
            finally:
                lock.close()
    releases = model_releases.on_disk(models_dir)

    if params["name"]:
        entry, problem = model_releases.resolve(params["name"], history, releases)
        if problem:
            module.fail_json(msg=problem, **result)
        if entry.get("kind", "release") == "release":
            model = model_releases.as_model(models_dir, entry, releases[entry["name"]])
        else:
            model = model_source.parts(entry.get("model_path") or entry["name"])
        result.update(entry=entry, model=model)

    if params["prune"]:
        doomed = model_releases.prunable(releases, history, params["keep"])
        incoming = os.path.join(models_dir, model_releases.INCOMING)
        lock, _holder = (None, None) if module.check_mode or not os.path.isdir(params["state_dir"]) else \
            model_releases.fetch_lock(params["state_dir"], 0)
        leftovers = sorted(os.listdir(incoming)) if os.path.isdir(incoming) and (lock or module.check_mode) else []
        result["removed"] = doomed + [os.path.join(model_releases.INCOMING, name) for name in leftovers]
        if result["removed"] and not module.check_mode:
            for name in doomed:
                model_releases.remove(models_dir, name)
                releases.pop(name)
            for name in leftovers:
                shutil.rmtree(os.path.join(incoming, name), ignore_errors=True)
        result["changed"] = bool(result["removed"])

    served = history[0]["name"] if history else None
    kept = {item.get("name") for item in model_releases.kept(history, params["keep"])}
    result["releases"] = [
        {"name": name, "fetched_at": manifest.get("fetched_at"),
         "bytes": model_releases.unique_bytes(model_releases.release_files(models_dir, name, manifest)),
         "state": "served" if name == served else "kept" if name in kept else "other"}
        for name, manifest in sorted(releases.items())]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
