"""What every role's input rules share (module_utils/input_rules/common.py): numbers read as inventories give them,
the addresses that mean every interface, and the refusals' form."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import (
    at_least, in_range, number, sentences, unspecified, whole)


@pytest.mark.parametrize("value, expected", [
    (8, 8), ("8", 8), (" 8 ", 8), ("+8", 8), ("-3", -3), (8.0, 8),
    (8.5, None), ("8.5", None), ("eight", None), ("", None), (None, None), (True, None), (False, None), ([8], None),
])
def test_whole_takes_an_int_or_its_digits_and_nothing_else(value, expected):
    assert whole(value) == expected


@pytest.mark.parametrize("value, expected", [
    (2, 2.0), ("0.2", 0.2), (1.5, 1.5), ("1e3", 1000.0), ("two", None), (None, None), (True, None), ({}, None),
])
def test_number_takes_ints_floats_and_their_text(value, expected):
    assert number(value) == expected


def test_bounds_refuse_what_is_not_a_whole_number():
    assert at_least(1, 1) and at_least("16", 1) and not at_least(0, 1) and not at_least("1.5", 1)
    assert in_range(1, 1, 65535) and in_range("65535", 1, 65535)
    assert not in_range(0, 1, 65535) and not in_range(65536, 1, 65535) and not in_range(None, 1, 65535)


@pytest.mark.parametrize("address, expected", [
    ("0.0.0.0", True), ("::", True), ("10.0.0.5", False), ("::1", False), ("not an address", False), ("", False),
])
def test_unspecified_is_every_interface_only(address, expected):
    assert unspecified(address) is expected


def test_each_refusal_is_one_sentence():
    assert sentences(["a is wrong: set b", "c is wrong."]) == ["a is wrong: set b.", "c is wrong."]
    assert sentences([]) == []
