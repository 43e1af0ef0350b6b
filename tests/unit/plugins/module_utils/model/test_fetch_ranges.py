"""The byte ranges of a part fetched over several connections: the plan covers the file once, the Content-Range answer
is parsed (not matched), a validator that changes is named, and a record that does not match its file is not used."""

import json

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges

MIB = 1 << 20


@pytest.mark.parametrize("total, connections, count", [
    (40 << 30, 8, 1280),  # the README's 70B as one file: ranges of 32 MiB, taken in order
    (256 << 20, 64, 32),  # 32 ranges of 8 MiB: none smaller
    (256 << 20, 4, 8),
    (20 * MIB, 8, 2),  # room for two 8 MiB ranges only
    (15 * MIB, 8, 1),  # too small for two: one stream
    (1, 8, 1),
    (8 * MIB * 3 + 5, 3, 3),
])
def test_the_plan_covers_every_byte_once(total, connections, count):
    spans = fetch_ranges.plan(total, connections)
    assert len(spans) == count
    assert spans[0][0] == 0 and spans[-1][1] == total - 1
    assert all(later[0] == earlier[1] + 1 for earlier, later in zip(spans, spans[1:]))
    assert all(landed == 0 for _first, _last, landed in spans)


def test_an_idle_connection_takes_half_of_the_largest_range_left():
    state = {"total": 64 * MIB, "ranges": fetch_ranges.plan(64 * MIB, 2)}
    state["ranges"][0][2] = 32 * MIB  # done
    state["ranges"][1][2] = 8 * MIB  # 24 MiB still to come
    taken = fetch_ranges.split_largest(state)
    assert taken == [52 * MIB, 64 * MIB - 1, 0] and state["ranges"][1] == [32 * MIB, 52 * MIB - 1, 8 * MIB]
    spans = sorted(state["ranges"])
    assert all(later[0] == earlier[1] + 1 for earlier, later in zip(spans, spans[1:])) and spans[-1][1] == 64 * MIB - 1
    state["ranges"][1][2] = 20 * MIB - 1  # 1 byte left there, 12 MiB in the taken one: too little to split again
    assert fetch_ranges.split_largest(state) is None
    taken[2] = 12 * MIB
    state["ranges"][1][2] = 20 * MIB
    assert fetch_ranges.split_largest(state) is None  # nothing left at all


@pytest.mark.parametrize("header, parsed", [
    ("bytes 0-99/1000", (0, 99, 1000)),
    ("bytes 100-100/*", (100, 100, None)),
    ("  bytes 5-9/10 ", (5, 9, 10)),
])
def test_a_content_range_is_parsed(header, parsed):
    assert fetch_ranges.content_range(header) == parsed


@pytest.mark.parametrize("header", ["", None, "bytes */1000", "items 0-1/2", "bytes 9-5/10", "bytes 0-x/10", "bytes -1-5/9",
                                    "bytes 0-5/ten", "bytes 0-5"])
def test_what_is_not_a_byte_range_is_refused(header):
    with pytest.raises(ValueError):
        fetch_ranges.content_range(header)


def test_a_validator_that_changes_is_named():
    began = {"ETag": '"a"', "Last-Modified": "Sun, 06 Dec 2026 10:00:00 GMT"}
    assert fetch_ranges.changed(began, dict(began)) is None
    assert fetch_ranges.changed(began, dict(began, ETag='"b"')) == 'its ETag was "a", then "b"'
    assert fetch_ranges.changed(began, {"ETag": '"a"'}) == \
        "its Last-Modified was Sun, 06 Dec 2026 10:00:00 GMT, then absent"
    assert fetch_ranges.changed({}, {"ETag": '"b"'}) is None  # a source that sent none at first cannot be compared


def test_a_record_is_used_only_for_its_file(tmp_path):
    partial = str(tmp_path / "part.gguf.partial")
    state = fetch_ranges.begin(partial, 20 * MIB, {"ETag": '"a"'}, 8)
    assert (tmp_path / "part.gguf.partial").stat().st_size == 20 * MIB
    assert (tmp_path / "part.gguf.partial").stat().st_blocks == 0  # sparse until the bytes land
    state["ranges"][0][2] = 5
    fetch_ranges.save(partial, state)
    assert fetch_ranges.load(partial) == state and fetch_ranges.landed(state) == 5
    assert len(fetch_ranges.unfinished(state)) == 2
    with open(partial, "ab") as handle:  # a file of another size than its record's
        handle.write(b"x")
    assert fetch_ranges.load(partial) is None
    with open(partial, "r+b") as handle:
        handle.truncate(20 * MIB)
    state["ranges"][1][2] = 11 * MIB  # more landed than the range holds
    fetch_ranges.save(partial, state)
    assert fetch_ranges.load(partial) is None
    (tmp_path / "part.gguf.partial.ranges").write_text(json.dumps({"total": "twenty"}))
    assert fetch_ranges.load(partial) is None
    fetch_ranges.forget(partial)
    assert fetch_ranges.load(partial) is None and not (tmp_path / "part.gguf.partial.ranges").exists()
