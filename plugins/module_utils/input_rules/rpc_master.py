# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rpc_master's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import os

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import parse_address
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import whole, number, at_least, in_range, sentences
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import speculative
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges, model_source
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import tensor_split


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

    mode = s.get("rpc_master_split_mode", "layer")
    if mode not in ("layer", "tensor"):
        found.append("rpc_master_split_mode=%s: set it to layer (whole layers per node, llama.cpp's default) or tensor (a "
                     "share of every layer on every worker)" % mode)
    on_master = bool(s.get("rpc_master_tensor_on_master"))
    if on_master and s.get("tunnelled"):
        found.append("rpc_master_tensor_on_master is true on %s, which reaches its workers over the WireGuard tunnel "
                     "(rpc_tunnel_enabled): the master's own RPC server is not offered there. Set "
                     "rpc_master_tensor_on_master: false, or rpc_tunnel_enabled: false for this cluster" % host)
    elif on_master and mode != "tensor":
        found.append("rpc_master_tensor_on_master is true, but rpc_master_split_mode is %s: the master's CPU holds a share "
                     "of every layer in tensor mode only (in layer mode llama.cpp puts layers on it itself). Set "
                     "rpc_master_split_mode: tensor, or rpc_master_tensor_on_master: false" % mode)
    if mode == "tensor" and 1 <= len(workers):
        found += [problem for problem in [tensor_split.worker_count_problem(len(workers), on_master)] if problem]
        if on_master and len(workers) == whole(s["max_workers"]):
            found.append("rpc_master_tensor_on_master would make the master's own RPC server the %dth, and llama.cpp uses "
                         "at most %s (GGML_RPC_MAX_SERVERS). Use fewer workers, or set rpc_master_tensor_on_master: false"
                         % (len(workers) + 1, s["max_workers"]))

    ranges = []
    fraction, probe = number(s["rpc_master_memory_fraction"]), number(s["rpc_master_probe_timeout"])
    for name, good, fix in (
            ("rpc_master_context_size", at_least(s["rpc_master_context_size"], 0), "set it to 0 (the model's) or more."),
            ("rpc_master_memory_fraction", fraction is not None and 0 < fraction <= 1, "set it above 0 and at most 1."),
            ("rpc_master_probe_timeout", probe is not None and probe > 0, "set it above 0 (seconds)."),
            ("rpc_master_server_port", in_range(s["rpc_master_server_port"], 1, 65535), "set it from 1 to 65535."),
            ("rpc_master_server_parallel", at_least(s["rpc_master_server_parallel"], 1), "set it to 1 or more (slots)."),
            ("rpc_master_threads", s["rpc_master_threads"] is None or at_least(s["rpc_master_threads"], 1),
             "set it to 1 or more, or null (llama.cpp's choice)."),
            ("rpc_master_load_threads", in_range(s["rpc_master_load_threads"], 0, 256),
             "set it from 0 (every CPU of the master) to 256 (threads that hash the model ahead of the load)."),
            ("rpc_master_model_download_timeout", at_least(s["rpc_master_model_download_timeout"], 1),
             "set it to 1 second or more."),
            ("rpc_master_model_read_timeout", at_least(s["rpc_master_model_read_timeout"], 1), "set it to 1 second or more."),
            ("rpc_master_model_download_attempts", at_least(s["rpc_master_model_download_attempts"], 1),
             "set it to 1 or more."),
            ("rpc_master_model_download_parallel", at_least(s["rpc_master_model_download_parallel"], 1),
             "set it to 1 or more (parts at once)."),
            ("rpc_master_model_download_connections",
             in_range(s["rpc_master_model_download_connections"], 1, fetch_ranges.MOST_CONNECTIONS),
             "set it from 1 (one stream per part) to %d (connections per part)." % fetch_ranges.MOST_CONNECTIONS),
            ("rpc_master_models_kept", at_least(s["rpc_master_models_kept"], 0),
             "set it to 0 (only the served model) or more (models kept for a rollback)."),
            ("rpc_master_server_cache_ram_mib", at_least(s["rpc_master_server_cache_ram_mib"], 0),
             "set it to 0 (no prompt cache) or more MiB; an unbounded cache (-1) cannot be planned."),
            ("rpc_master_server_drain_seconds", at_least(s.get("rpc_master_server_drain_seconds", 0), 0),
             "set it to 0 (stop at once) or more seconds (the requests in flight end first).")):
        if not good:
            ranges.append("%s=%s: %s" % (name, s[name], fix))
    if ranges:
        found.append("Out of range: " + " ".join(ranges))

    idle = number(s.get("rpc_master_idle_stop_minutes", 0))
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

    found += speculation(s)

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
    return sentences(found)


def speculation(s):
    """Speculative decoding's settings: a kind the pinned llama.cpp has, a draft model exactly for the kinds that load
    one (its source and checksums as the model's, but no S3), draft lengths within the context, llama-server on."""
    kind = s.get("rpc_master_spec_type", "none")
    if kind in (None, "", "none"):
        return []
    if kind not in speculative.TYPES:
        return ["rpc_master_spec_type=%s is no kind of speculative decoding llama.cpp has: set it to none (off), one with "
                "a draft model (%s, with rpc_master_spec_draft_src) or one without (%s)."
                % (kind, ", ".join(speculative.DRAFT_MODEL_TYPES), ", ".join(speculative.SELF_TYPES))]
    found = []
    if not s["rpc_master_server_enabled"]:
        found.append("rpc_master_spec_type=%s speeds up llama-server, which rpc_master_server_enabled: false leaves out: "
                     "set rpc_master_spec_type: none, or enable the server." % kind)
    source = s.get("rpc_master_spec_draft_src") or ""
    if kind in speculative.DRAFT_MODEL_TYPES:
        if not source:
            found.append("rpc_master_spec_type=%s drafts with a model of its own: set rpc_master_spec_draft_src to a small "
                         "model of the same family (a path on the master or an http(s) URL), or choose a kind that needs "
                         "none (%s)." % (kind, ", ".join(speculative.SELF_TYPES)))
        else:
            draft = model_source.parts(source, s.get("rpc_master_spec_draft_sha256") or "",
                                       s.get("rpc_master_spec_draft_sha256sums") or "", "", "rpc_master_spec_draft")
            if draft["kind"] == "s3" or model_source.kind_of(s.get("rpc_master_spec_draft_sha256sums") or "") == "s3":
                found.append("rpc_master_spec_draft_src: a draft is fetched from a path on the master or an http(s) URL, "
                             "not from S3: copy it to the master, or give an https URL (an S3 presigned one works).")
            else:
                found += draft["problems"]
    elif source:
        found.append("rpc_master_spec_draft_src is set, and rpc_master_spec_type=%s drafts without a model: set "
                     "rpc_master_spec_draft_src: \"\" or a kind with a draft model (%s)."
                     % (kind, ", ".join(speculative.DRAFT_MODEL_TYPES)))
    most, least, context = s.get("rpc_master_spec_draft_max"), s.get("rpc_master_spec_draft_min"), whole(s["rpc_master_context_size"])
    if not at_least(most, 1) or (context and whole(most) >= context):
        found.append("rpc_master_spec_draft_max=%s: set it from 1 to %s (tokens drafted per step; fewer than the context "
                     "rpc_master_context_size)." % (most, context - 1 if context else "the context"))
    elif not in_range(least, 0, whole(most)):
        found.append("rpc_master_spec_draft_min=%s: set it from 0 to rpc_master_spec_draft_max (%s)." % (least, most))
    return found
