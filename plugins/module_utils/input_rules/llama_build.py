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
    Beside its variables: min_safe_version (the first tag without the RPC server's remote code execution) and
    patch_files (the role's patches, as <tag>/<name>.patch below its files/patches)."""
    s, found = settings, []
    version, safe = str(s["llama_build_version"]), s["min_safe_version"]
    if not re.fullmatch(r"b[0-9]+", version):
        found.append("llama_build_version=%s is not a llama.cpp tag. Set it to bNNNN, for example b11312" % version)
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
    found.extend(patch_problems(s["llama_build_patches"], version, patch_tags(s["patch_files"])))
    return sentences(found)


def patch_tags(patch_files):
    """{patch name: [the tags it is written for]} from the role's <tag>/<name>.patch files."""
    tags = {}
    for path in patch_files:
        tag, _slash, file_name = str(path).rpartition("/")
        if tag and file_name.endswith(".patch"):
            tags.setdefault(file_name[:-len(".patch")], []).append(tag)
    return tags


def patch_problems(patches, version, tags):
    """llama_build_patches: a list of the collection's patches, each with a file for the pinned tag.
    tags: patch_tags()."""
    if not isinstance(patches, list) or not all(isinstance(name, str) for name in patches):
        return ["llama_build_patches=%r is not a list of patch names. Set it to [] or a list of: %s"
                % (patches, ", ".join(sorted(tags)) or "none")]
    found = []
    for name in patches:
        if name not in tags:
            found.append("llama_build_patches has '%s', which is not one of the collection's patches (%s). Remove it"
                         % (name, ", ".join(sorted(tags)) or "none"))
        elif version not in tags[name]:
            found.append("llama_build_patches has %s, which is written for llama.cpp %s, not for llama_build_version=%s "
                         "(it changes code that moves between tags). Pin %s, or remove %s from llama_build_patches"
                         % (name, " and ".join(sorted(tags[name])), version, sorted(tags[name])[-1], name))
    if len(set(patches)) != len(patches):
        found.append("llama_build_patches names a patch twice (%s). Name each once" % ", ".join(patches))
    for first, second in EXCLUSIVE:
        if first in patches and second in patches:
            found.append("llama_build_patches has both %s and %s, which change the same code of the master's load (%s "
                         "hashes what it must on one thread per worker). List one of them" % (first, second, second))
    return found


# Patches that change the same code, and so cannot be applied together.
EXCLUSIVE = (("rpc_hash_ahead", "rpc_known_hashes"),)
