# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A part fetched over several connections at once: its byte ranges, what each has landed, and the source's validator
(its ETag and Last-Modified) that every range must come back with. They are kept beside the download, in
<part>.partial.ranges, so that each range resumes on its own after a cut, in this call or a later one.

Only the ranges' plan and its record live here; FetchTransfer (fetch_transfer.py) runs the connections.
"""

from __future__ import annotations

import json
import os

# S3's guidance for byte-range fetches: "typical sizes ... are 8 MB or 16 MB"; a smaller range is not worth its request.
SMALLEST_RANGE = 8 << 20
# Ranges are taken in file order and none is larger than this, so that the bytes landed from the start on grow steadily
# and the hash follows them (sha256_job.follow_file) rather than reading the whole file after; each range is a request
# (and a connection) of its own, so not much smaller.
LARGEST_RANGE = 32 << 20
# More connections than this to one source is not a download but a load on it (and a rule's typo: 10,000).
MOST_CONNECTIONS = 64
SUFFIX = ".ranges"
VALIDATORS = ("ETag", "Last-Modified")


class SourceChanged(Exception):
    """The source answered a range of another file than the one the download began with (another ETag or date)."""


class NoRanges(Exception):
    """The source answered a range with the whole file: it fetches over one connection."""


def plan(total, connections):
    """The ranges of a file of total bytes over connections at once, in file order: [[first byte, last byte, bytes
    landed], ...]; a range per connection for a small file, ranges of LARGEST_RANGE for a large one, and one range (no
    split) when the file is too small for two of SMALLEST_RANGE."""
    count = max(1, min(connections, total // SMALLEST_RANGE))
    size = min(-(-total // count), max(LARGEST_RANGE, SMALLEST_RANGE))
    return [[start, min(start + size, total) - 1, 0] for start in range(0, total, size)]


def split_largest(state):
    """Half of the unfinished range with the most bytes still to come, as a range of its own (the other half stays
    with the connection on it, which stops at its new end); None when no range has two SMALLEST_RANGE left."""
    spans = unfinished(state)
    if not spans:
        return None
    span = max(spans, key=lambda each: each[1] + 1 - each[0] - each[2])
    left = span[1] + 1 - span[0] - span[2]
    if left < 2 * SMALLEST_RANGE:
        return None
    middle = span[0] + span[2] + left // 2
    taken = [middle, span[1], 0]
    span[1] = middle - 1
    state["ranges"].append(taken)
    return taken


def validator(headers):
    """What identifies the file a response came from: its ETag and Last-Modified, those it sent."""
    return {name: headers.get(name) for name in VALIDATORS if headers.get(name)}


def changed(began, answered):
    """Why a range's answer is of another file than the one the download began with, or None. A header the source did
    not send at the start is not compared (a source that sends none cannot be checked; the sha256 still is)."""
    for name in VALIDATORS:
        if began.get(name) and answered.get(name) != began[name]:
            return "its %s was %s, then %s" % (name, began[name], answered.get(name) or "absent")
    return None


def content_range(value):
    """(first, last, total) from a Content-Range header ("bytes 0-99/1000"), total None for "*"; ValueError otherwise."""
    unit, _space, spec = (value or "").strip().partition(" ")
    span, _slash, size = spec.partition("/")
    first, _dash, last = span.partition("-")
    if unit != "bytes" or not first.isdigit() or not last.isdigit() or not (size.isdigit() or size == "*"):
        raise ValueError("not a byte range: %r" % value)
    first, last = int(first), int(last)
    if last < first:
        raise ValueError("a byte range that ends before it begins: %r" % value)
    return first, last, None if size == "*" else int(size)


def landed(state):
    return sum(done for _first, _last, done in state["ranges"])


def prefix(state):
    """The bytes landed from the file's start on, without a gap: what a hash can read."""
    landed_from_start = 0
    for first, last, done in sorted(state["ranges"]):
        if first != landed_from_start:
            break
        landed_from_start += done
        if done < last + 1 - first:
            break
    return landed_from_start


def unfinished(state):
    return [span for span in state["ranges"] if span[2] < span[1] + 1 - span[0]]


def record_path(partial):
    return partial + SUFFIX


def load(partial):
    """The ranges recorded for a download, or None (none recorded, or a record that does not match the file: the
    download is then one stream's, resumed from its size)."""
    try:
        with open(record_path(partial)) as handle:
            state = json.load(handle)
        if os.path.getsize(partial) != state["total"]:
            return None
        if not all(0 <= done <= last + 1 - first for first, last, done in state["ranges"]):
            return None
        state.pop("prefix", None)  # for the hash that follows; worked out again at each save
        return state
    except (OSError, ValueError, KeyError, TypeError):
        return None


def begin(partial, total, began, connections):
    """A ranged download from nothing: the file made its full size (sparse: the bytes land where they belong) and its
    record written. Returns the state."""
    with open(partial, "wb") as handle:
        handle.truncate(total)
    state = {"total": total, "validator": began, "ranges": plan(total, connections)}
    save(partial, state)
    return state


def save(partial, state):
    """The record written whole (a hash that follows the download reads its prefix and total meanwhile)."""
    path = record_path(partial)
    with open(path + ".tmp", "w") as handle:
        json.dump(dict(state, prefix=prefix(state)), handle)
    os.replace(path + ".tmp", path)


def forget(partial):
    """The record gone: the file is whole (or is fetched again from its start)."""
    for path in (record_path(partial), record_path(partial) + ".tmp"):
        if os.path.exists(path):
            os.unlink(path)
