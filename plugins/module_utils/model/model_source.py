# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a model comes from and where it goes: the parts of rpc_master_model_src, their checksums and their names.

A source is a path on the master (used in place), an http(s):// URL or an s3://bucket/key, of one GGUF file or of the
first part of a multi-part set (llama.cpp's names, NAME-00001-of-00009.gguf: the other parts are found by name beside
it), or a list of the parts. A download is kept under llama.cpp's names (a new name keeps the pattern:
NAME-0000k-of-0000n.gguf) in a release of its own in the models directory (model_releases.py). Checksums: one sha256,
a list of one per part, or a checksum file (sha256sum's format) that names the parts.

parts() returns every problem of the inputs at once, each naming the variable and the fix, so the role can refuse
before anything on a host changes.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit, urlunsplit

SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})\.gguf$")


def kind_of(source):
    """path, url, s3, or unknown."""
    if not isinstance(source, str) or not source:
        return "unknown"
    parts = urlsplit(source)
    if parts.scheme == "" and source.startswith("/"):
        return "path"
    if parts.scheme in ("http", "https") and parts.hostname and len(parts.path) > 1:
        return "url"
    if parts.scheme == "s3" and parts.netloc and len(parts.path) > 1:
        return "s3"
    return "unknown"


def file_name(source):
    """The file name a source names: a path's, or the last segment of a URL's or S3 key's path."""
    return posixpath.basename(source if kind_of(source) == "path" else urlsplit(source).path)


def _with_name(source, name):
    """The source with its file name replaced (a URL keeps its query: Hugging Face's ?download=true)."""
    if kind_of(source) == "path":
        return posixpath.join(posixpath.dirname(source), name)
    parts = urlsplit(source)
    return urlunsplit(parts._replace(path=posixpath.join(posixpath.dirname(parts.path), name)))


def split_name(name):
    """(prefix, number, count) of NAME-0000k-of-0000n.gguf, else None."""
    match = SPLIT.match(name)
    return (match.group("prefix"), int(match.group("number")), int(match.group("count"))) if match else None


def part_name(prefix, number, count):
    return "%s-%05d-of-%05d.gguf" % (prefix, number, count)


def parts(source, sha256="", sha256sums="", name="", variables="rpc_master_model"):
    """The parts of a model source, its checksums' variables named variables_src, variables_sha256, ... in the messages
    (rpc_master_model, or rpc_master_spec_draft for the draft model). {"kind", "parts": [{"number", "src", "name"
    (published), "file" (on the master), "sha256", and for a path "dest"}], "model_path" (what llama.cpp loads: a path's
    first part; empty for a download, whose release names it), "base_name", "checksums" ("sha256", "sha256sums" or
    "none"), "problems": [...]}."""
    problems = []
    listed = isinstance(source, list)
    sources = list(source) if listed else [source]
    kinds = sorted({kind_of(item) for item in sources})
    kind = kinds[0] if len(kinds) == 1 else "unknown"
    if not sources or kind == "unknown":
        shown = ", ".join(repr(item) for item in sources) or "(empty)"
        problems.append("%s=%s is not a model source. Set it to an absolute path on the master, an http(s):// URL or "
                        "s3://bucket/key of a .gguf file (a multi-part set's first part, NAME-00001-of-0000N.gguf), or a "
                        "list of a set's parts, all of one kind." % (variables + "_src", shown if listed else sources[0] or "(empty)"))
        return {"kind": "unknown", "parts": [], "model_path": "", "base_name": "", "checksums": "none",
                "problems": problems}

    names = [file_name(item) for item in sources]
    splits = [split_name(item) for item in names]
    if listed and len(sources) > 1:
        expected = [(splits[0][0] if splits[0] else "NAME", number, len(sources)) for number in range(1, len(sources) + 1)]
        if splits != expected:
            problems.append("%s lists %d parts named %s: a set's parts must be listed in order under llama.cpp's names, "
                            "%s ... %s (the names llama.cpp finds the parts by)." % (
                                variables + "_src", len(sources), ", ".join(names), part_name(*expected[0]), part_name(*expected[-1])))
        sources_all = sources
    elif splits[0] and splits[0][2] > 1:
        prefix, number, count = splits[0]
        if number != 1:
            problems.append("%s=%s is part %d of %d of a multi-part set: point it at the first part, %s (llama.cpp loads a "
                            "set from its first part)." % (variables + "_src", sources[0], number, count, part_name(prefix, 1, count)))
        sources_all = [_with_name(sources[0], part_name(prefix, index, count)) for index in range(1, count + 1)]
    else:
        sources_all = sources[:1]
    count = len(sources_all)
    names = [file_name(item) for item in sources_all]

    # each part's name on the master: a path's own; a download's the name asked for (the set's pattern kept), in its
    # release's directory (module_utils/model/model_releases.py), which its checksums name. A path is written plainly
    # (posixpath.normpath), as ansible.builtin.find returns it: rpc_master looks each part up by its path.
    if kind == "path":
        sources_all = [posixpath.normpath(item) for item in sources_all]
        files = [posixpath.basename(item) for item in sources_all]
    else:
        wanted = name or names[0]
        if "/" in wanted or wanted in (".", ".."):
            problems.append("{name}=%s must be a file name, not a path: the model goes into "
                            "rpc_master_models_dir." % wanted)
            wanted = names[0]
        if count > 1:
            base = split_name(wanted)[0] if split_name(wanted) else (wanted[:-5] if wanted.endswith(".gguf") else wanted)
            files = [part_name(base, index, count) for index in range(1, count + 1)]
        else:
            files = [wanted]

    checksums = "none"
    sums = [""] * count
    given = sha256 if isinstance(sha256, list) else ([sha256] if sha256 else [])
    if given and sha256sums:
        problems.append("set one of {sha} and {sums}, not both.")
    elif given:
        checksums = "sha256"
        bad = [value for value in given if not (isinstance(value, str) and SHA256.match(value))]
        if bad:
            problems.append("{sha} must be sha256 checksums (64 hex digits), got %s. Take them from the "
                            "model's publisher (the Hugging Face file pages) or run sha256sum on a trusted copy."
                            % ", ".join(repr(value) for value in bad))
        elif len(given) != count:
            problems.append("{sha} gives %d checksum(s) for %d part(s): give a list of one per part, in "
                            "order, or {sums} (a checksum file that names the parts)."
                            % (len(given), count))
        else:
            sums = [value.lower() for value in given]
    elif sha256sums:
        checksums = "sha256sums"
        if kind_of(sha256sums) == "unknown":
            problems.append("{sums}=%s is not a checksum file: give a path on the master, an "
                            "http(s):// URL or s3://bucket/key of a file in sha256sum's format." % sha256sums)
    if checksums == "none" and kind != "path":
        problems.append("{sha} (one per part) or {sums} is required for a "
                        "download: a downloaded model is used only when its bytes are the publisher's.")

    base = split_name(files[0])
    base_name = base[0] if base else files[0]
    if base_name.endswith(".gguf"):
        base_name = base_name[:-5]
    parts_found = []
    for index, (src, file, digest) in enumerate(zip(sources_all, files, sums)):
        part = {"number": index + 1, "src": src, "name": file_name(src), "file": file, "sha256": digest}
        if kind == "path":
            part["dest"] = src
        parts_found.append(part)
    return {
        "kind": kind,
        "parts": parts_found,
        "model_path": sources_all[0] if kind == "path" else "",
        "base_name": base_name,
        "checksums": checksums,
        # the variables' names go in last: a value quoted in a problem may hold braces
        "problems": [problem.replace("{sums}", variables + "_sha256sums").replace("{sha}", variables + "_sha256")
                     .replace("{name}", variables + "_name") for problem in problems],
    }


def parse_sha256sums(text):
    """{file name: sha256} from sha256sum's output ("HEX  NAME" or "HEX *NAME"; paths are reduced to their names)."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 1)
        if len(fields) == 2 and SHA256.match(fields[0]):
            found[posixpath.basename(fields[1].lstrip("*").strip())] = fields[0].lower()
    return found
