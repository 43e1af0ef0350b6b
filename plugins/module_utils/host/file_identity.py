# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What tells a file changed without reading it, decided in one place: the model fetch's "already verified", the
record of the tensor hashes (and the known-hashes loader that reads it), the workers' tensor cache and its guard.

Size, modification time and inode alone let through a write that puts the modification time back (touch -r) and a
file removed and copied back with its times (cp -p) onto a reused inode number; the status change time is set by the
kernel on every such change and cannot be put back. A hash certifies a file only when its identity is the same before
and after the read.
"""

from __future__ import annotations

import os


def stat_identity(seen):
    """[inode, size, modification time ns, status change time ns] of an os.stat() result."""
    return [seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns]


def identity(path):
    return stat_identity(os.stat(path))


def changed_since(seen, written):
    """Whether the file seen (an os.stat() result) may have changed after written (one of the record that vouches for
    it) was: strict, as the known-hashes loader compares them, since both times tick coarsely (a few ms) and a change
    in the record's own tick is not known to come before it."""
    return seen.st_ctime_ns >= written.st_ctime_ns
