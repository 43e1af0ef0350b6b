# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Address and network inputs, parsed with Python's ipaddress (never matched with a pattern), and the
refusal for each bad one: it names the variable, says what is wrong and what to write instead.

Why parse: a pattern let '300.1.2.3/32' through, and amazon.aws then silently rewrote it into another
public /32 that was admitted to SSH; '10.0.0.7/16' would be widened to its whole /16 the same way.
"""

from __future__ import annotations

import ipaddress

FAMILY = {4: "IPv4", 6: "IPv6"}
KINDS = ("address", "network", "sources")


class InputProblem(ValueError):
    """A bad input; its text names the variable and the fix."""


def parse_address(text):
    """One IP address ('10.0.0.5', 'fd00::5') -> IPv4Address/IPv6Address; ValueError with the reason."""
    if "/" in text:
        raise ValueError("%s is a network (it has a prefix length), not one address: write %s"
                         % (text, text.split("/", 1)[0]))
    # ':' only chooses the parser, so that a bad value gets the reason of the family it was meant for; parsing decides.
    return ipaddress.IPv6Address(text) if ":" in text else ipaddress.IPv4Address(text)


def parse_network(text):
    """A network written address/prefix-length with no host bits -> IPv4Network/IPv6Network; ValueError otherwise."""
    address, slash, prefix = text.partition("/")
    if not slash:
        host = parse_address(text)
        raise ValueError("%s has no prefix length: for this address alone write %s/%d" % (text, host, host.max_prefixlen))
    if not prefix.isdigit():
        raise ValueError("%s: write the prefix length as a number (a.b.c.d/n), not a netmask" % text)
    host = parse_address(address)
    if int(prefix) > host.max_prefixlen:
        raise ValueError("%s: an %s prefix length is 0 to %d" % (text, FAMILY[host.version], host.max_prefixlen))
    network = ipaddress.ip_network("%s/%s" % (host, prefix), strict=False)
    if network.network_address != host:
        raise ValueError("%s has host bits set (AWS and nftables would quietly widen it to %s): for this address alone "
                         "write %s/%d, for the whole network %s" % (text, network, host, host.max_prefixlen, network))
    return network


def parse_source(text):
    """An address or a network (a firewall source)."""
    return parse_network(text) if "/" in text else parse_address(text)


def describe(value):
    """What the collection needs to know about one parsed address or network (for the ip_parse filter)."""
    parsed = parse_source(str(value).strip())
    address = parsed.network_address if isinstance(parsed, (ipaddress.IPv4Network, ipaddress.IPv6Network)) else parsed
    text = str(parsed)
    return {
        "text": text,
        "version": parsed.version,
        "network": getattr(parsed, "num_addresses", 1) > 1,
        # as a network in CIDR form (one address as its /32 or /128), as security groups and firewalls take it
        "cidr": str(ipaddress.ip_network(parsed)),
        "unspecified": address.is_unspecified,
        "loopback": address.is_loopback,
        # how it is written before ':port' in an endpoint or a URL
        "url_host": "[%s]" % text if parsed.version == 6 else text,
    }


class _Checked:
    """One spec of problems(): its name, value and what it parsed to."""

    def __init__(self, spec):
        self.name = spec["name"]
        self.kind = spec.get("kind", "address")
        if self.kind not in KINDS:
            raise InputProblem("%s has kind %r; use one of %s" % (self.name, self.kind, ", ".join(KINDS)))
        self.value = spec.get("value")
        self.spec = spec
        self.parsed = None


def _one(text, kind):
    return {"address": parse_address, "network": parse_network, "sources": parse_source}[kind](text)


def _check(checked, by_name):
    """The problem of one spec, or None; sets checked.parsed when the value is good."""
    spec, name, value = checked.spec, checked.name, checked.value
    values = value if checked.kind == "sources" else [value]
    if checked.kind == "sources" and (isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple))):
        return "%s must be a list of addresses or networks, got %r" % (name, value)
    if checked.kind != "sources" and not isinstance(value, str):
        return "%s must be a string (an IP %s), got %r" % (name, checked.kind, value)
    parsed = []
    for item in values:
        text = str(item).strip()
        shown = "%s=%r" % (name, text) if checked.kind != "sources" else "%s entry %r" % (name, text)
        if not text:
            return "%s is empty: %s" % (name, spec.get("empty_fix") or "set it to an IP %s" % checked.kind)
        try:
            one = _one(text, checked.kind)
        except ValueError as error:
            wanted = "address or network" if checked.kind == "sources" else checked.kind
            return "%s is not an IP %s: %s" % (shown, wanted, error)
        if spec.get("version") and one.version != int(spec["version"]):
            reason = spec.get("version_reason") or "give an %s value" % FAMILY[int(spec["version"])]
            return "%s is %s; %s" % (shown, FAMILY[one.version], reason)
        if spec.get("private") and not one.is_private:
            reason = spec.get("private_reason") or "give a private (RFC 1918) address or network"
            return "%s is public; %s" % (shown, reason)
        if spec.get("prefix") and checked.kind == "network":
            low, high = (int(bound) for bound in spec["prefix"])
            if not low <= one.prefixlen <= high:
                return "%s: %s" % (shown, spec.get("prefix_reason") or "the prefix length must be /%d to /%d" % (low, high))
        parsed.append(one)
    within = by_name.get(spec.get("within") or "")
    if within is not None and within.parsed is not None:
        outer = within.parsed[0]
        for one in parsed:
            if one.version != outer.version or not one.subnet_of(outer):
                return "%s=%s is not inside %s=%s: choose a block inside it" % (name, one, within.name, outer)
    for other_name in spec.get("disjoint") or []:
        other = by_name.get(other_name)
        if other is not None and other.parsed is not None:
            for one in parsed:
                for theirs in other.parsed:
                    if one.version == theirs.version and one.overlaps(theirs):
                        return "%s=%s overlaps %s=%s: give each its own block" % (name, one, other.name, theirs)
    checked.parsed = parsed
    return None


def problems(specs):
    """The refusals (sentences) for a list of inputs, in the order given (the order the user sets them); [] when all
    are good.

    Each spec: name (the variable), value, kind ('address', 'network' or 'sources': a list of addresses or networks),
    and optionally version (4 or 6) with version_reason, prefix ([low, high], networks) with prefix_reason, within (the
    name of an earlier network spec this one must lie inside), disjoint (names of earlier specs it must not overlap),
    private (every value a private address or network) with private_reason, empty_fix (what to write when it is empty).
    """
    found, by_name = [], {}
    for spec in specs:
        checked = _Checked(spec)
        problem = _check(checked, by_name)
        if problem:
            found.append(problem if problem.endswith(".") else problem + ".")
        by_name[checked.name] = checked
    return found
