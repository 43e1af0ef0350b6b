# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the modules that work on the models a master keeps (model_fetch, model_releases): where the
releases are, which models it served, and how many of the earlier ones it keeps."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods

    DOCUMENTATION = r"""
options:
  models_dir:
    description: Where the releases are kept (C(rpc_master_models_dir)).
    type: path
    default: /var/lib/llama-models
  history:
    description:
      - The models the master served, newest first (the first is the one served now), as the rpc_master role publishes
        them (local fact C(llama_rpc_master), C(releases)). Each has C(name), C(kind) (C(release) or C(path)) and, for
        a path, C(model_path).
    type: list
    elements: dict
    default: []
  keep:
    description: How many models served before the current one are kept (C(rpc_master_models_kept)).
    type: int
    default: 1
"""
