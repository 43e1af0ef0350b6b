# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama_build's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import sentences


def llama_build(settings):
    """llama_build's rules for what to build (the CPU's flags, the archive's contents and the disk are the host's).
    Beside its variables: min_safe_version (the first release without the RPC server's remote code execution)."""
    s, found = settings, []
    version, safe = str(s["llama_build_version"]), s["min_safe_version"]
    if not re.fullmatch(r"b[0-9]+", version):
        found.append("llama_build_version=%s is not a llama.cpp release tag. Set it to bNNNN, for example b11312" % version)
    elif int(version[1:]) < safe and not s["llama_build_allow_vulnerable_version"]:
        found.append("llama_build_version=%s is older than b%d: its RPC server lets anyone who reaches it run code "
                     "(CVE-2026-34159). Pin b%d or newer. Only if you accept that risk on an isolated network, set "
                     "llama_build_allow_vulnerable_version: true" % (version, safe, safe))
    if s["llama_build_source"] == "archive":
        needs = []
        if not s["llama_build_archive_src"]:
            needs.append("llama_build_archive_src (empty): set it to the archive's URL or a path on the controller.")
        if not re.fullmatch(r"[0-9a-fA-F]{64}", str(s["llama_build_archive_sha256"])):
            needs.append("llama_build_archive_sha256 (64 hex digits, now '%s'): set it to the archive's sha256."
                         % s["llama_build_archive_sha256"])
        if not s["llama_build_archive_subdir"]:
            needs.append("llama_build_archive_subdir (empty): set it to the directory with llama.cpp's CMakeLists.txt.")
        if needs:
            found.append("llama_build_source=archive needs: " + " ".join(needs))
    return sentences(found)
