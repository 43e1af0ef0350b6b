# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's input rules, in one place a unit test can call: one function per role takes its settings (the
variables as the user set them, and what the role resolved from the host and the inventory) and returns the
refusals, one sentence each, naming the variable and what to write instead; [] when all are good.

A role's pre-flight calls its function through the input_problems filter and fails on the first non-empty answer,
before anything on a host or in AWS changes. What only a host can answer (is this address one of its own, is a port
free, does a file exist on it) stays in the role; the unit tests cover every rule here
(tests/unit/plugins/module_utils/test_input_rules.py).
"""

from __future__ import annotations

import os
import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils import load_time
from ansible_collections.graviton.llama_rpc.plugins.module_utils.addresses import parse_address, problems as address_problems

_NAME = re.compile(r"^[a-z0-9_-]+$")
_CACHE_DIR = re.compile(r"^/var/cache/[A-Za-z0-9._/-]+$")
_KEY = re.compile(r"^\S+$")


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


def _number(value):
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


def _unspecified(text):
    """Whether an address is 0.0.0.0 or :: (every interface); False for what does not parse (named elsewhere)."""
    try:
        return parse_address(str(text)).is_unspecified
    except ValueError:
        return False


def _sentences(found):
    return [problem if problem.endswith(".") else problem + "." for problem in found]


def rpc_worker(settings):
    """rpc_worker's rules. Beside its variables, settings holds what the role resolved: host (inventory_hostname),
    binary (the worker program: rpc_worker_binary or the build's), tunnel (rpc_tunnel's state, {} without one), address
    (the address it will bind), host_ipv4 (the host's IPv4 addresses), default_address (its default-route address),
    worker_total (the instances of its cluster in this play), max_workers, master_group_hosts, sources (who the
    firewall would let in)."""
    s, found = settings, []
    host = s["host"]
    if not s["binary"]:
        found.append("No RPC worker program: run the graviton.llama_rpc.llama_build role on %s first (it sets the fact "
                     "llama_build_current and publishes the local fact llama_rpc_build), or set rpc_worker_binary to "
                     "the path of ggml-rpc-server" % host)
    listed = s["rpc_worker_instances"] or []
    instances = listed or [{"name": "main", "port": s["rpc_worker_port"]}]
    for entry in instances:
        if not isinstance(entry, dict):
            found.append("rpc_worker_instances entry %r must be a mapping with a name and a port" % (entry,))
            continue
        wrong = []
        if not _NAME.match(str(entry.get("name", ""))):
            wrong.append("a name of lower-case letters, digits, - and _")
        if not in_range(entry.get("port"), 1, 65535):
            wrong.append("a port from 1 to 65535")
        if entry.get("threads") is not None and not at_least(entry["threads"], 1):
            wrong.append("threads of at least 1 (or none)")
        if wrong:
            found.append("rpc_worker_port=%s must be from 1 to 65535" % s["rpc_worker_port"] if not listed else
                         "rpc_worker_instances entry %s needs %s" % (entry, ", ".join(wrong)))
    mappings = [entry for entry in instances if isinstance(entry, dict)]
    names = [entry.get("name") for entry in mappings]
    ports = [whole(entry.get("port")) for entry in mappings]
    if len(set(map(str, names))) != len(names) or len(set(ports)) != len(ports):
        found.append("rpc_worker_instances: each instance needs its own name and its own port (%s)" % (instances,))
    if s["rpc_worker_threads"] is not None and not at_least(s["rpc_worker_threads"], 1):
        found.append("rpc_worker_threads=%s: a worker needs at least 1 thread (leave it unset for one per vCPU)"
                     % s["rpc_worker_threads"])
    if s["rpc_worker_watchdog_enabled"] and not (at_least(s["rpc_worker_watchdog_timeout"], 1)
                                                 and at_least(s["rpc_worker_watchdog_interval"], 1)):
        found.append("rpc_worker_watchdog_timeout (%s) and rpc_worker_watchdog_interval (%s) must be 1 second or more "
                     "(or set rpc_worker_watchdog_enabled: false)"
                     % (s["rpc_worker_watchdog_timeout"], s["rpc_worker_watchdog_interval"]))
    tunnelled = bool((s["tunnel"] or {}).get("address"))
    if tunnelled:
        # On the tunnel the worker's address and its master's are the tunnel's: settings of their own would undo it.
        conflicts = ((["rpc_worker_bind_address is %s" % s["rpc_worker_bind_address"]] if s["rpc_worker_bind_address"] else [])
                     + (["rpc_worker_allow_any_address is true"] if s["rpc_worker_allow_any_address"] else [])
                     + (["rpc_worker_allowed_sources is %s" % ", ".join(map(str, s["rpc_worker_allowed_sources"]))]
                        if s["rpc_worker_allowed_sources"] else []))
        if conflicts:
            found.append("%s is on the WireGuard tunnel (rpc_tunnel_enabled), where the worker listens on its tunnel "
                         "address only and admits its master's only, but %s: leave them unset, or set "
                         "rpc_tunnel_enabled: false for its cluster" % (host, " and ".join(conflicts)))
    # Parsed, not matched: an address must be exactly one (no prefix, no host name), a source an address or a network
    # without host bits (nftables would widen 10.0.0.7/16 to the whole /16 quietly).
    found += address_problems([
        {"name": "rpc_worker_bind_address", "value": s["address"], "kind": "address", "version": 4,
         "version_reason": "llama.cpp's RPC server listens on IPv4 only (AF_INET sockets): give an IPv4 address of this host.",
         "empty_fix": "%s has no default route, so no private address to default to: set it to one of %s"
                      % (host, ", ".join(s["host_ipv4"]) or "its addresses")},
        {"name": "rpc_worker_allowed_sources", "value": s["rpc_worker_allowed_sources"], "kind": "sources"}])
    if _unspecified(s["address"]):
        if not s["rpc_worker_allow_any_address"]:
            found.append("rpc_worker_bind_address=%s would expose the RPC server, which is unauthenticated (anyone who "
                         "reaches it can read and write its memory), on every interface. Leave it empty (this host's "
                         "private address) or set a private address. If you really mean it, set "
                         "rpc_worker_allow_any_address: true" % s["address"])
        elif not s["default_address"]:
            found.append("rpc_worker_bind_address=%s (every interface) leaves no address to give the master: %s has no "
                         "default route. Set rpc_worker_bind_address to its private address" % (s["address"], host))
    cache_dir = str(s["rpc_worker_cache_dir"])
    if not _CACHE_DIR.match(cache_dir) or ".." in cache_dir:
        found.append("rpc_worker_cache_dir=%s cannot be created: systemd creates it for the worker's user "
                     "(CacheDirectory=), so it must be a path under /var/cache/" % cache_dir)
    if not 1 <= s["worker_total"] <= whole(s["max_workers"]):
        found.append("This play sets up %s RPC worker instances; one llama.cpp master uses 1 to %s (GGML_RPC_MAX_SERVERS). "
                     "Use fewer hosts or fewer rpc_worker_instances" % (s["worker_total"], s["max_workers"]))
    firewall = s["rpc_worker_firewall_enabled"]
    group = s["rpc_worker_master_group"]
    if firewall and not s["rpc_worker_allowed_sources"] and len(s["master_group_hosts"]) > 1:
        # Several masters in the group would all be let in: a cluster's workers admit their own master only.
        found.append("Group '%s' holds %s: %s lets in the master of its own cluster only. Put its master alone in that "
                     "group; for several clusters in one inventory, give each cluster's group rpc_master_group and "
                     "rpc_master_worker_group (inventories/README.md). Or list the master in rpc_worker_allowed_sources"
                     % (group, ", ".join(s["master_group_hosts"]), host))
    elif firewall and not s["sources"]:
        found.append("The firewall would let no master in: no address for the hosts of group '%s' (gather their facts "
                     "in this play, e.g. run the play on them too) and rpc_worker_allowed_sources is empty. Set "
                     "rpc_worker_allowed_sources to the master's private address(es), or rpc_worker_firewall_enabled: "
                     "false" % group)
    return _sentences(found)


def gateway(settings):
    """The gateway's rules. Beside its variables: host, address (gateway_bind_address or the default-route address),
    host_ipv4, masters (the hosts of gateway_master_group), backends (per master: master, name, url), master_keys (each
    master's rpc_master_server_api_key). No key is ever part of a refusal."""
    s, found = settings, []
    if not in_range(s["gateway_port"], 1, 65535):
        found.append("gateway_port=%s: set it from 1 to 65535" % s["gateway_port"])
    found += address_problems([
        {"name": "gateway_bind_address", "value": s["address"], "kind": "address",
         "empty_fix": "%s has no default route to take its address from: set it to one of %s"
                      % (s["host"], ", ".join(s["host_ipv4"]) or "its addresses")}])
    for name, unit in (("gateway_check_interval", " second"), ("gateway_check_timeout", " second"),
                       ("gateway_check_fall", ""), ("gateway_check_rise", ""), ("gateway_request_timeout", " second"),
                       ("gateway_max_connections", ""), ("gateway_tls_self_signed_days", "")):
        if not at_least(s[name], 1):
            found.append("%s=%s: set it to 1%s or more" % (name, s[name], unit))
    certificate, key = s["gateway_tls_certificate"], s["gateway_tls_private_key"]
    if bool(certificate) != bool(key):
        found.append("Give both gateway_tls_certificate and gateway_tls_private_key, or neither (a self-signed certificate)")
    for name, path in (("gateway_tls_certificate", certificate), ("gateway_tls_private_key", key)):
        if path and not os.path.isfile(path):  # on the controller: the role copies them from there
            found.append("%s='%s': no such file on the controller" % (name, path))
    keys = s["gateway_api_keys"]
    if (not isinstance(keys, (list, tuple)) or not keys
            or not all(isinstance(one, (str, int)) and _KEY.match(str(one)) for one in keys)):
        found.append("gateway_api_keys must list the keys clients send (Authorization: Bearer <key>), at least one, each "
                     "without spaces or line breaks. Keep them in Ansible Vault")
    group = s["gateway_master_group"]
    if not s["masters"]:
        found.append("Group '%s' holds no masters: put the clusters' masters in it, or set gateway_master_group to the "
                     "group that holds them" % group)
    for backend in s["backends"]:
        if not backend["url"]:
            found.append("%s has no llama-server: deploy it first (playbooks/deploy.yml) with rpc_master_server_enabled "
                         "true, or take it out of group '%s'" % (backend["master"], group))
    wake = s.get("gateway_wake_timeout", 0)
    if not at_least(wake, 0):
        found.append("gateway_wake_timeout=%s: set it to 0 (no wake) or more seconds" % wake)
    elif whole(wake) > 0:
        unwakeable = [backend["master"] for backend in s["backends"] if backend["url"] and not backend.get("wake")]
        if unwakeable:
            found.append("gateway_wake_timeout wakes stopped clusters through each master's wake socket, which %s "
                         "lack: deploy them with rpc_master_wake_port set (playbooks/deploy.yml), or set "
                         "gateway_wake_timeout: 0" % ", ".join(unwakeable))
        rise = whole(s.get("gateway_check_rise")) or 0
        interval = whole(s.get("gateway_check_interval")) or 0
        for backend in s["backends"]:
            seconds = _number(backend.get("start_seconds"))
            if seconds is None:
                continue
            boot = load_time.figure("ec2_boot_s") if str(backend.get("wake", "")).startswith("aws:") else 0
            start = boot + seconds + rise * interval
            if whole(wake) < start:
                found.append("gateway_wake_timeout=%s is shorter than the predicted start of %s's cluster: %.0f s (%sits "
                             "load from the workers' caches, %.1f s by the load-time model, then %d health checks %d s "
                             "apart): set it to %d or more" % (wake, backend["master"], start,
                                                               "its instances' boot, %.0f s, then " % boot if boot else "",
                                                               seconds, rise, interval, int(start + 0.999)))
    names = [backend["name"] for backend in s["backends"]]
    if len(set(names)) != len(names):
        found.append("Two masters have the same name once characters HAProxy does not take are replaced with _: rename one")
    # The gateway sends every request on with the masters' key: they must share one (never shown).
    master_keys = s["master_keys"]
    if s["masters"] and (not all(master_keys) or len(set(master_keys)) != 1):
        found.append("The masters %s must all have the same non-empty rpc_master_server_api_key: the gateway sends each "
                     "request on with it, to whichever cluster takes it. Set it once for all of them (group_vars of %s) "
                     "and redeploy" % (", ".join(s["masters"]), group))
    return _sentences(found)


def bench(settings):
    """bench's rules. Beside its variables: worker_total (the workers rpc_master published on the master, None where it
    published none: the role then says to deploy first). bench_compare_with is a file on the controller."""
    s, found = settings, []

    def sizes(name, what):
        values = s[name]
        if not values or not all(at_least(value, 0) for value in values):
            found.append("%s=%s: list %s of 0 or more" % (name, values, what))

    def one_or_more(name):
        if not at_least(s[name], 1):
            found.append("%s=%s: set it to 1 or more" % (name, s[name]))

    sizes("bench_n_prompt", "prompt sizes")
    sizes("bench_n_gen", "generation sizes")
    one_or_more("bench_repetitions")
    one_or_more("bench_tcp_megabytes")
    counts, total = s["bench_worker_counts"], s["worker_total"]
    if not all(at_least(value, 1) for value in counts):
        found.append("bench_worker_counts=%s: list counts of 1 or more, or none (1 to all)" % (counts,))
    elif total is not None and counts and max(whole(value) for value in counts) > total:
        found.append("bench_worker_counts=%s asks for more workers than the cluster has (%d): list counts from 1 to %d, "
                     "or none (1 to all)" % (counts, total, total))
    if not all(at_least(value, 1) for value in s["bench_concurrency"]):
        found.append("bench_concurrency=%s: list numbers of clients of 1 or more, or none (no measurement)"
                     % (s["bench_concurrency"],))
    one_or_more("bench_concurrency_requests")
    one_or_more("bench_concurrency_tokens")
    compare = s["bench_compare_with"]
    if compare and not os.path.isfile(compare):
        found.append("bench_compare_with='%s': give an existing result file on the controller, or nothing" % compare)
    return _sentences(found)


def rpc_tunnel(settings):
    """rpc_tunnel's rules for one host (the cluster's, such as its network, are the tunnel plan's: module_utils/tunnel.py).
    Beside its variables: host, groups (the hosts of the master group and of the worker group, in that order)."""
    s, found = settings, []
    masters, workers = s["groups"]
    if s["host"] not in masters and s["host"] not in workers:
        found.append("%s is in neither the master group '%s' nor the worker group '%s': the tunnel joins a master with its "
                     "workers. Put it in one of them, or set rpc_master_group and rpc_master_worker_group for its cluster "
                     "(inventories/README.md)" % (s["host"], s["rpc_tunnel_master_group"], s["rpc_tunnel_worker_group"]))
    generation = s["rpc_tunnel_key_generation"]
    if not (re.fullmatch(r"[0-9]+", str(generation)) and int(generation) >= 1) or isinstance(generation, bool):
        found.append("rpc_tunnel_key_generation=%s: a whole number, 1 or more (raise it to rotate this host's key)"
                     % generation)
    if not in_range(s["rpc_tunnel_port"], 1, 65535):
        found.append("rpc_tunnel_port=%s: set it from 1 to 65535, WireGuard's UDP port, the same on every host of the cluster"
                     % s["rpc_tunnel_port"])
    if s["rpc_tunnel_endpoint_address"]:
        found += address_problems([{"name": "rpc_tunnel_endpoint_address", "value": s["rpc_tunnel_endpoint_address"],
                                    "kind": "address"}])
    return _sentences(found)


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
    return _sentences(found)


def rpc_master(settings):
    """rpc_master's rules (the model's source, parts and checksums are model_source's; its files and headers are the
    master's). Beside its variables: host, masters and workers (the hosts of its groups), max_workers, server_address
    (rpc_master_server_bind_address or the default-route address), host_addresses (the host's IPv4 and IPv6 addresses),
    host_ipv4, api_key_given (whether rpc_master_server_api_key is set: the key itself never comes here)."""
    s, found = settings, []
    host, masters, workers = s["host"], s["masters"], s["workers"]
    if list(masters) != [host]:
        found.append("The cluster needs exactly one master: group '%s' holds %s and this play runs the role on %s. Put one "
                     "host in '%s' and run the role on that host only. For several clusters in one inventory, give each "
                     "cluster's group rpc_master_group and rpc_master_worker_group (inventories/README.md)"
                     % (s["rpc_master_group"], ", ".join(masters) or "no hosts", host, s["rpc_master_group"]))
    if not 1 <= len(workers) <= whole(s["max_workers"]):
        found.append("Group '%s' holds %d hosts; a llama.cpp master uses 1 to %s RPC workers (GGML_RPC_MAX_SERVERS). Put "
                     "the worker hosts in '%s' (or set rpc_master_worker_group)"
                     % (s["rpc_master_worker_group"], len(workers), s["max_workers"], s["rpc_master_worker_group"]))

    ranges = []
    fraction, probe = _number(s["rpc_master_memory_fraction"]), _number(s["rpc_master_probe_timeout"])
    for name, good, fix in (
            ("rpc_master_context_size", at_least(s["rpc_master_context_size"], 0), "set it to 0 (the model's) or more."),
            ("rpc_master_memory_fraction", fraction is not None and 0 < fraction <= 1, "set it above 0 and at most 1."),
            ("rpc_master_probe_timeout", probe is not None and probe > 0, "set it above 0 (seconds)."),
            ("rpc_master_server_port", in_range(s["rpc_master_server_port"], 1, 65535), "set it from 1 to 65535."),
            ("rpc_master_server_parallel", at_least(s["rpc_master_server_parallel"], 1), "set it to 1 or more (slots)."),
            ("rpc_master_threads", s["rpc_master_threads"] is None or at_least(s["rpc_master_threads"], 1),
             "set it to 1 or more, or null (llama.cpp's choice)."),
            ("rpc_master_model_download_timeout", at_least(s["rpc_master_model_download_timeout"], 1),
             "set it to 1 second or more."),
            ("rpc_master_model_read_timeout", at_least(s["rpc_master_model_read_timeout"], 1), "set it to 1 second or more."),
            ("rpc_master_model_download_attempts", at_least(s["rpc_master_model_download_attempts"], 1),
             "set it to 1 or more."),
            ("rpc_master_model_download_parallel", at_least(s["rpc_master_model_download_parallel"], 1),
             "set it to 1 or more (parts at once)."),
            ("rpc_master_models_kept", at_least(s["rpc_master_models_kept"], 0),
             "set it to 0 (only the served model) or more (models kept for a rollback)."),
            ("rpc_master_server_cache_ram_mib", at_least(s["rpc_master_server_cache_ram_mib"], 0),
             "set it to 0 (no prompt cache) or more MiB; an unbounded cache (-1) cannot be planned.")):
        if not good:
            ranges.append("%s=%s: %s" % (name, s[name], fix))
    if ranges:
        found.append("Out of range: " + " ".join(ranges))

    idle = _number(s.get("rpc_master_idle_stop_minutes", 0))
    if idle is None or idle < 0:
        found.append("rpc_master_idle_stop_minutes=%s: set it to 0 (never) or more minutes." % s.get("rpc_master_idle_stop_minutes"))
    elif idle > 0:
        interval = whole(s["rpc_master_watchdog_interval"])
        if not s["rpc_master_server_enabled"] or not s["rpc_master_server_metrics"]:
            found.append("The idle stop reads llama-server's /metrics: set rpc_master_server_enabled and "
                         "rpc_master_server_metrics to true (or rpc_master_idle_stop_minutes: 0).")
        elif interval is not None and interval >= 1 and idle * 60 < 2 * interval:
            found.append("rpc_master_idle_stop_minutes=%s is shorter than two of the watchdog's checks "
                         "(rpc_master_watchdog_interval=%s s): set it to %s or more." % (idle, interval, round(2 * interval / 60, 2)))
        if s.get("idle_stop_driver") == "aws" and not s.get("idle_stop_region"):
            found.append("The idle stop of an AWS master needs its region, which the inventory inventories/aws gives "
                         "(hostvar placement.region): run with that inventory, or set rpc_master_idle_stop_minutes: 0.")

    wake = s.get("rpc_master_wake_port", 0)
    if not in_range(wake, 0, 65535):
        found.append("rpc_master_wake_port=%s: set it from 1 to 65535 (the wake socket), or 0 (none)." % wake)
    elif whole(wake) and whole(wake) == whole(s["rpc_master_server_port"]):
        found.append("rpc_master_wake_port=%s is llama-server's own port (rpc_master_server_port): give the wake socket "
                     "a port of its own." % wake)
    elif whole(wake) and not s["rpc_master_server_enabled"]:
        found.append("rpc_master_wake_port=%s starts llama-server, which rpc_master_server_enabled: false leaves out: "
                     "set rpc_master_wake_port: 0, or enable the server." % wake)

    if s["rpc_master_server_enabled"]:
        if s["rpc_master_watchdog_enabled"]:
            if not s["rpc_master_server_metrics"]:
                found.append("The watchdog asks llama-server's /metrics whether its main loop still answers: set "
                             "rpc_master_server_metrics: true (or rpc_master_watchdog_enabled: false).")
            for name in ("rpc_master_watchdog_timeout", "rpc_master_watchdog_interval"):
                if not at_least(s[name], 1):
                    found.append("%s=%s: set it to 1 second or more." % (name, s[name]))
        elif idle and idle > 0 and not at_least(s["rpc_master_watchdog_interval"], 1):
            found.append("rpc_master_watchdog_interval=%s: set it to 1 second or more (the idle stop's checks)."
                         % s["rpc_master_watchdog_interval"])
        address = s["server_address"]
        bad_address = address_problems([
            {"name": "rpc_master_server_bind_address", "value": address, "kind": "address",
             "empty_fix": "%s has no default route to take its private address from: set it to one of %s, or 127.0.0.1"
                          % (host, ", ".join(s["host_ipv4"]) or "its addresses")}])
        found += bad_address
        server = []
        if not s["api_key_given"]:
            server.append("llama-server needs rpc_master_server_api_key (non-empty; keep it in Ansible Vault).")
        if not bad_address:
            bind = parse_address(str(address).strip())
            if not bind.is_loopback and str(bind) not in s["host_addresses"]:
                server.append("llama-server binds to an address of this host (%s or 127.0.0.1; got '%s', never 0.0.0.0): "
                              "set rpc_master_server_bind_address." % (", ".join(s["host_addresses"]), address))
        if server:
            found.append(" ".join(server) + " Or set rpc_master_server_enabled: false.")

    if s["rpc_master_infer"]:
        infer = []
        prompt, prompt_file = s["rpc_master_infer_prompt"], s["rpc_master_infer_prompt_file"]
        if bool(prompt) == bool(prompt_file):
            infer.append("set exactly one of rpc_master_infer_prompt and rpc_master_infer_prompt_file (a file on the "
                         "controller).")
        if prompt_file and not os.path.isfile(prompt_file):
            infer.append("rpc_master_infer_prompt_file: %s does not exist on the controller." % prompt_file)
        if not at_least(s["rpc_master_infer_tokens"], 1):
            infer.append("rpc_master_infer_tokens=%s: set it to 1 or more." % s["rpc_master_infer_tokens"])
        if infer:
            found.append("One-shot inference: " + " ".join(infer))
    return _sentences(found)


def _aws_cluster_identity(s, purpose):
    """The region and the name a cluster is found by in AWS (its tags), for provisioning and for teardown alike."""
    found = []
    if not s["aws_infra_region"]:
        found.append("aws_infra_region is empty: set the region %s (for example us-east-1)." % purpose)
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}[a-z0-9]", str(s["aws_infra_cluster_name"])):
        found.append("aws_infra_cluster_name='%s': use 3 to 32 lowercase letters, digits and dashes, starting with a "
                     "letter (it names and tags everything)." % s["aws_infra_cluster_name"])
    return found


def aws_infra_teardown(settings):
    """aws_infra's rules for its teardown (tasks_from: teardown.yml): the region and the name the cluster's resources
    are found by, and nothing else (teardown needs no network or key to delete what carries the tag)."""
    return _sentences(_aws_cluster_identity(settings, "of the cluster to delete"))


def aws_infra_power(settings):
    """aws_infra's rules for stopping and starting a cluster (tasks_from: power.yml): the region and the name its
    instances are found by, and the state asked for."""
    found = _aws_cluster_identity(settings, "of the cluster to stop or start")
    if settings["aws_infra_power"] not in ("stopped", "running"):
        found.append("aws_infra_power='%s': set it to stopped or running (playbooks/stop.yml and start.yml do)."
                     % settings["aws_infra_power"])
    return _sentences(found)


def aws_infra(settings):
    """aws_infra's rules, in the order the user sets the variables (what only AWS knows, such as the key pair and the
    instance types of the region, is asked of AWS after these). Beside its variables: max_workers."""
    s = settings
    found = _aws_cluster_identity(s, "to create the cluster in")
    subnet = {"kind": "network", "version": 4, "prefix": [16, 28], "prefix_reason": "a subnet takes an IPv4 block from /16 to /28."}
    # Parsed (a pattern once let 300.1.2.3/32 through, and amazon.aws rewrote it into another /32).
    found += address_problems([
        {"name": "aws_infra_admin_cidr", "value": s["aws_infra_admin_cidr"], "kind": "network", "version": 4,
         "version_reason": "the VPC has IPv4 only: give the IPv4 address you connect from, as a.b.c.d/32.",
         "empty_fix": "set it to the addresses that may reach SSH on the master, such as your own as a.b.c.d/32."},
        {"name": "aws_infra_vpc_cidr", "value": s["aws_infra_vpc_cidr"], "kind": "network", "version": 4,
         "prefix": [16, 28], "prefix_reason": "a VPC takes an IPv4 block from /16 to /28."},
        dict(subnet, name="aws_infra_public_subnet_cidr", value=s["aws_infra_public_subnet_cidr"], within="aws_infra_vpc_cidr"),
        dict(subnet, name="aws_infra_private_subnet_cidr", value=s["aws_infra_private_subnet_cidr"],
             within="aws_infra_vpc_cidr", disjoint=["aws_infra_public_subnet_cidr"]),
        {"name": "aws_infra_server_allowed_sources", "value": s["aws_infra_server_allowed_sources"], "kind": "sources",
         "version": 4, "version_reason": "the VPC has IPv4 only.", "private": True,
         "private_reason": "llama-server speaks plain HTTP, so its API key would cross the internet in clear: admit "
                           "private networks only (a TLS-terminating load balancer's subnets in the VPC, a peered VPC, a VPN)."}])
    if not s["aws_infra_key_name"]:
        found.append("aws_infra_key_name is empty: set it to the name of an EC2 key pair in %s, for SSH." % s["aws_infra_region"])
    if not in_range(s["aws_infra_worker_count"], 1, whole(s["max_workers"])):
        found.append("aws_infra_worker_count=%s: set aws_infra_worker_count from 1 to %s (llama.cpp's limit on RPC workers)."
                     % (s["aws_infra_worker_count"], s["max_workers"]))
    if bool(s["aws_infra_vpc_id"]) != bool(s["aws_infra_subnet_id"]):
        found.append("aws_infra_vpc_id and aws_infra_subnet_id: set both (an existing VPC and its subnet) or neither (a new VPC).")
    if not in_range(s["aws_infra_rpc_port"], 1, 65535):
        found.append("aws_infra_rpc_port=%s: set it from 1 to 65535." % s["aws_infra_rpc_port"])
    if not in_range(s["aws_infra_server_port"], 1, 65535) or whole(s["aws_infra_server_port"]) in (22, whole(s["aws_infra_rpc_port"])):
        found.append("aws_infra_server_port=%s: set it from 1 to 65535, other than SSH (22) and the RPC port."
                     % s["aws_infra_server_port"])
    # gp3's limits (docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html)
    throughput, iops = whole(s["aws_infra_volume_throughput_mib_s"]), whole(s["aws_infra_volume_iops"])
    throughput_good = throughput is not None and 125 <= throughput <= 1000
    if not throughput_good:
        found.append("aws_infra_volume_throughput_mib_s=%s: gp3 takes 125 to 1000." % s["aws_infra_volume_throughput_mib_s"])
    if iops is None or not 3000 <= iops <= 16000:
        found.append("aws_infra_volume_iops=%s: gp3 takes 3000 to 16000." % s["aws_infra_volume_iops"])
    if throughput_good and throughput > (iops or 0) * 0.25:
        found.append("gp3 carries at most 0.25 MiB/s per IOPS: for %d MiB/s set aws_infra_volume_iops to at least %d."
                     % (throughput, throughput * 4))
    if s["aws_infra_admin_cidr"] == "0.0.0.0/0" and not s["aws_infra_ssh_from_anywhere"]:
        found.append("aws_infra_admin_cidr=0.0.0.0/0 would open SSH on the master to the whole internet. Use your own "
                     "address (for example the output of `curl -s https://checkip.amazonaws.com`/32) or, knowingly, "
                     "aws_infra_ssh_from_anywhere: true.")
    return _sentences(found)


ROLES = {"aws_infra": aws_infra, "aws_infra_teardown": aws_infra_teardown, "aws_infra_power": aws_infra_power,
         "llama_build": llama_build, "rpc_tunnel": rpc_tunnel, "rpc_worker": rpc_worker, "rpc_master": rpc_master,
         "gateway": gateway, "bench": bench}


def input_problems(settings, role):
    """The refusals of role's rules for settings; KeyError names a setting the caller left out."""
    return ROLES[role](settings)
