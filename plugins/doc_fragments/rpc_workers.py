# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC workers a module speaks to, as llama.cpp takes them (llama_infer, rpc_probe)."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods

    DOCUMENTATION = r"""
options:
  workers:
    description:
      - The RPC workers, as C(host:port) (C([v6addr]:port) for IPv6), 1 to 16 (llama.cpp's limit).
      - A worker serves one client at a time.
    type: list
    elements: str
    required: true
"""
