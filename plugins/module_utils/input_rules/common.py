# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every role's input rules share: numbers as inventories give them, the addresses that mean
every interface, and the refusals' form (one sentence each)."""

from __future__ import annotations

import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import parse_address


def whole(value):
    """A whole number as inventories give them (an int, or its digits as text); None for anything else, as Jinja's
    | int would give 0 for it."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    text = str(value).strip()
    return int(text) if re.fullmatch(r"[-+]?[0-9]+", text) else None


def number(value):
    """A number as inventories give them (int, float or its text); None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def at_least(value, low):
    number = whole(value)
    return number is not None and number >= low


def in_range(value, low, high):
    number = whole(value)
    return number is not None and low <= number <= high


def unspecified(text):
    """Whether an address is 0.0.0.0 or :: (every interface); False for what does not parse (named elsewhere)."""
    try:
        return parse_address(str(text)).is_unspecified
    except ValueError:
        return False


def sentences(found):
    return [problem if problem.endswith(".") else problem + "." for problem in found]
