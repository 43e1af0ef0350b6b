"""The roles' input rules (module_utils/input_rules.py, through the input_problems filter the pre-flights call), case by
case: each bad setting is refused with a sentence that names it and the fix, only the wrong ones are named, and the
roles' own defaults pass. The containers' bad-input tests keep a few of these end to end, to prove that a refusal
touches nothing on a host (tests/integration/bad_input)."""

import re
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems

ROOT = Path(__file__).resolve().parents[4]


def defaults(role):
    """The role's defaults as a user who sets nothing gets them (templated ones are given by each test's context)."""
    values = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    return {name: value for name, value in values.items() if not (isinstance(value, str) and "{{" in value)}


def refusals(role, context, overrides):
    settings = defaults(role)
    settings.update(context)
    settings.update(overrides)
    return input_problems(settings, role)


def check(role, context, overrides, messages):
    """A refusal that holds every message and names no setting (name=value) that the messages do not name."""
    found = refusals(role, context, overrides)
    text = " ".join(found)
    assert found, "refused nothing"
    for message in messages:
        assert message in text, "%r not in %r" % (message, text)
    named = set(re.findall(r"\b([a-z][a-z0-9_]+)=", text))
    # the settings the case changed, and those its messages name
    expected = set(overrides) | set(re.findall(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b", " ".join(messages)))
    assert named <= expected, "a good setting was named: %s" % sorted(named - expected)
    return found


def test_unknown_role_and_missing_setting_are_named():
    with pytest.raises(AnsibleFilterError, match="no rules for role 'nope'"):
        input_problems({}, "nope")
    with pytest.raises(AnsibleFilterError, match="the role did not pass setting 'host'"):
        input_problems(defaults("rpc_worker"), "rpc_worker")


# --- rpc_worker ---------------------------------------------------------------------------------------------------
WORKER = {"host": "worker-1", "binary": "/opt/llama.cpp/current/bin/ggml-rpc-server", "tunnel": {}, "address": "10.0.0.5",
          "host_ipv4": ["10.0.0.5"], "default_address": "10.0.0.5", "worker_total": 1, "max_workers": 16,
          "master_group_hosts": ["master"], "sources": ["10.9.9.9"], "rpc_worker_master_group": "llama_master",
          "rpc_worker_allowed_sources": ["10.9.9.9"]}
TUNNEL = {"address": "10.213.0.2", "interface": "llama-rpc", "unit": "llama-rpc-tunnel",
          "peers": [{"host": "m", "address": "10.213.0.1", "public_key": "k"}]}

WORKER_CASES = {
    "port out of range": ({"rpc_worker_port": 70000}, ["rpc_worker_port=70000 must be from 1 to 65535"]),
    "port that is not a number": ({"rpc_worker_port": "http"}, ["rpc_worker_port=http must be from 1 to 65535"]),
    # only what is wrong in the entry is named
    "instance port out of range": ({"rpc_worker_instances": [{"name": "a", "port": 0}]},
                                   ["rpc_worker_instances entry {'name': 'a', 'port': 0} needs a port from 1 to 65535."]),
    "instance name and threads wrong": ({"rpc_worker_instances": [{"name": "A b", "port": 50052, "threads": 0}]},
                                        ["needs a name of lower-case letters, digits, - and _, threads of at least 1 (or none)."]),
    "instance that is not a mapping": ({"rpc_worker_instances": ["a:50052"]}, ["entry 'a:50052' must be a mapping"]),
    "duplicate instance ports": ({"rpc_worker_instances": [{"name": "a", "port": 50052}, {"name": "b", "port": "50052"}]},
                                 ["each instance needs its own name and its own port"]),
    "duplicate instance names": ({"rpc_worker_instances": [{"name": "a", "port": 50052}, {"name": "a", "port": 50053}]},
                                 ["each instance needs its own name and its own port"]),
    "threads below 1": ({"rpc_worker_threads": 0}, ["rpc_worker_threads=0: a worker needs at least 1 thread"]),
    "watchdog interval of 0": ({"rpc_worker_watchdog_interval": 0},
                               ["rpc_worker_watchdog_timeout (300) and rpc_worker_watchdog_interval (0) must be 1 second"]),
    # addresses are parsed: each of these names the variable and what to write instead
    "bind address that is a host name": ({"address": "worker-1.internal"},
                                         ["rpc_worker_bind_address='worker-1.internal' is not an IP address"]),
    "bind address with a prefix length": ({"address": "10.0.0.5/24"},
                                          ["rpc_worker_bind_address='10.0.0.5/24'",
                                           "is a network (it has a prefix length), not one address: write 10.0.0.5"]),
    "IPv6 bind address": ({"address": "fd00::5"},
                          ["rpc_worker_bind_address='fd00::5' is IPv6; llama.cpp's RPC server listens on IPv4 only"]),
    "no address at all": ({"address": "", "default_address": "", "host_ipv4": ["172.17.0.4"]},
                          ["worker-1 has no default route, so no private address to default to: set it to one of 172.17.0.4"]),
    "master address with an octet above 255": ({"rpc_worker_allowed_sources": ["10.9.9.300"]},
                                               ["rpc_worker_allowed_sources entry '10.9.9.300' is not an IP address or network",
                                                "Octet 300 (> 255)"]),
    "master network with host bits": ({"rpc_worker_allowed_sources": ["10.9.9.9/16"]},
                                      ["for this address alone write 10.9.9.9/32, for the whole network 10.9.0.0/16"]),
    "every interface without the override": ({"address": "0.0.0.0", "rpc_worker_bind_address": "0.0.0.0"},
                                             ["unauthenticated", "rpc_worker_allow_any_address: true"]),
    "every interface with no address to give the master": (
        {"address": "0.0.0.0", "rpc_worker_allow_any_address": True, "default_address": ""},
        ["rpc_worker_bind_address=0.0.0.0 (every interface) leaves no address to give the master: worker-1 has no default"]),
    "cache directory that cannot be created": ({"rpc_worker_cache_dir": "/proc/llama-cache"},
                                               ["rpc_worker_cache_dir=/proc/llama-cache cannot be created"]),
    "cache directory that climbs out of /var/cache": ({"rpc_worker_cache_dir": "/var/cache/../../etc"},
                                                      ["rpc_worker_cache_dir=/var/cache/../../etc cannot be created"]),
    "more than 16 workers": ({"worker_total": 17}, ["sets up 17 RPC worker instances; one llama.cpp master uses 1 to 16"]),
    "firewall without a master": ({"rpc_worker_allowed_sources": [], "sources": []},
                                  ["The firewall would let no master in", "rpc_worker_allowed_sources"]),
    "a master group of several clusters": ({"rpc_worker_allowed_sources": [], "master_group_hosts": ["master-a", "master-b"]},
                                           ["Group 'llama_master' holds master-a, master-b",
                                            "rpc_master_group and rpc_master_worker_group"]),
    "no worker program": ({"binary": ""}, ["run the graviton.llama_rpc.llama_build role", "rpc_worker_binary"]),
    # on the WireGuard tunnel (as rpc_tunnel publishes it) the worker's address and its master's are the tunnel's
    "settings that would undo the tunnel": (
        {"tunnel": TUNNEL, "address": "10.213.0.2", "rpc_worker_bind_address": "10.213.0.2", "rpc_worker_allow_any_address": True},
        ["is on the WireGuard tunnel (rpc_tunnel_enabled), where the worker listens on its tunnel address only",
         "but rpc_worker_bind_address is 10.213.0.2 and rpc_worker_allow_any_address is true and "
         "rpc_worker_allowed_sources is 10.9.9.9: leave them unset, or set rpc_tunnel_enabled: false"]),
}


def test_rpc_worker_defaults_pass():
    assert refusals("rpc_worker", WORKER, {}) == []
    # on the tunnel with nothing of its own; several instances; the firewall off needs no master
    assert refusals("rpc_worker", WORKER, {"tunnel": TUNNEL, "rpc_worker_allowed_sources": []}) == []
    assert refusals("rpc_worker", WORKER, {"rpc_worker_instances": [{"name": "a", "port": 50052, "threads": 4},
                                                                    {"name": "b_2", "port": "50053", "threads": None}]}) == []
    assert refusals("rpc_worker", WORKER, {"rpc_worker_firewall_enabled": False, "rpc_worker_allowed_sources": [],
                                           "sources": []}) == []


@pytest.mark.parametrize("case", sorted(WORKER_CASES))
def test_rpc_worker_bad_input_is_refused_by_name(case):
    overrides, messages = WORKER_CASES[case]
    found = check("rpc_worker", WORKER, overrides, messages)
    assert len(found) == 1, "%s: more than the one wrong thing named: %s" % (case, found)


def test_rpc_worker_names_two_bad_addresses_together_and_nothing_else():
    found = refusals("rpc_worker", WORKER, {"address": "10.0.0.5/24", "rpc_worker_allowed_sources": ["10.9.9.9", "fd00::1/64"]})
    text = " ".join(found)
    assert "rpc_worker_bind_address='10.0.0.5/24'" in text and "entry 'fd00::1/64'" in text, text
    assert "'10.9.9.9'" not in text, "a good source was named"


# --- gateway ------------------------------------------------------------------------------------------------------
GATEWAY = {"host": "gateway", "address": "10.0.0.9", "host_ipv4": ["10.0.0.9"], "masters": ["master-a", "master-b"],
           "backends": [{"master": "master-a", "name": "master-a", "url": "http://10.9.8.1:8080"},
                        {"master": "master-b", "name": "master-b", "url": "http://10.9.8.2:8080"}],
           "master_keys": ["server-key-not-for-output"] * 2, "gateway_api_keys": ["client-key-not-for-output"]}
WAKEABLE = [dict(backend, wake=backend["url"][7:].replace(":8080", ":8091"), start_seconds=3.5)
            for backend in GATEWAY["backends"]]
SECRETS = ("client-key-not-for-output", "server-key-not-for-output", "another-server-key", "two words")

GATEWAY_CASES = {
    "no client key": ({"gateway_api_keys": []}, ["gateway_api_keys must list the keys clients send"]),
    "client keys that are no list": ({"gateway_api_keys": "client-key-not-for-output"},
                                     ["gateway_api_keys must list the keys clients send"]),
    "a client key with a space": ({"gateway_api_keys": ["two words"]}, ["each without spaces or line breaks"]),
    "port 0 and a check that never fails": ({"gateway_port": 0, "gateway_check_fall": 0},
                                            ["gateway_port=0: set it from 1 to 65535. gateway_check_fall=0: set it to 1 or more."]),
    "interval, timeout and request timeout of 0": (
        {"gateway_check_interval": 0, "gateway_check_timeout": "0", "gateway_request_timeout": -5},
        ["gateway_check_interval=0: set it to 1 second or more. gateway_check_timeout=0: set it to 1 second or more. "
         "gateway_request_timeout=-5: set it to 1 second or more."]),
    "rise, connections and certificate days of 0": (
        {"gateway_check_rise": 0, "gateway_max_connections": 0, "gateway_tls_self_signed_days": 0},
        ["gateway_check_rise=0: set it to 1 or more. gateway_max_connections=0: set it to 1 or more. "
         "gateway_tls_self_signed_days=0: set it to 1 or more."]),
    "a certificate without its key": ({"gateway_tls_certificate": "/etc/hostname"},
                                      ["Give both gateway_tls_certificate and gateway_tls_private_key, or neither"]),
    "a certificate that does not exist": ({"gateway_tls_certificate": "/nonexistent/gw.pem",
                                           "gateway_tls_private_key": "/etc/hostname"},
                                          ["gateway_tls_certificate='/nonexistent/gw.pem': no such file on the controller."]),
    "a host name to bind": ({"address": "gw.internal"}, ["gateway_bind_address='gw.internal' is not an IP address"]),
    "no masters": ({"masters": [], "backends": [], "master_keys": []}, ["Group 'llama_master' holds no masters"]),
    "a master without llama-server": (
        {"masters": ["master-a", "bare-master"], "backends": [GATEWAY["backends"][0],
                                                              {"master": "bare-master", "name": "bare-master", "url": ""}]},
        ["bare-master has no llama-server: deploy it first (playbooks/deploy.yml)"]),
    "two masters of one HAProxy name": (
        {"backends": [dict(backend, name="master_a") for backend in GATEWAY["backends"]]},
        ["Two masters have the same name once characters HAProxy does not take are replaced with _"]),
    "masters with different keys": ({"master_keys": ["server-key-not-for-output", "another-server-key"]},
                                    ["must all have the same non-empty rpc_master_server_api_key"]),
    "a master without a key": ({"master_keys": ["server-key-not-for-output", ""]},
                               ["must all have the same non-empty rpc_master_server_api_key"]),
    "a negative wake bound": ({"gateway_wake_timeout": -1}, ["gateway_wake_timeout=-1: set it to 0 (no wake) or more seconds"]),
    "a wake with a master that has no wake socket": (
        {"gateway_wake_timeout": 60, "backends": [WAKEABLE[0], GATEWAY["backends"][1]]},
        ["gateway_wake_timeout wakes stopped clusters through each master's wake socket, which master-b lack: deploy "
         "them with rpc_master_wake_port set"]),
    "a wake bound shorter than a cluster's predicted start": (
        {"gateway_wake_timeout": 60, "backends": [WAKEABLE[0], dict(WAKEABLE[1], start_seconds=111.2)]},
        ["gateway_wake_timeout=60 is shorter than the predicted start of master-b's cluster: 115 s (its load from the "
         "workers' caches, 111.2 s by the load-time model, then 2 health checks 2 s apart): set it to 116 or more"]),
    "a wake bound shorter than an AWS cluster's boot and load": (
        {"gateway_wake_timeout": 60, "backends": [WAKEABLE[0], dict(WAKEABLE[1], wake="aws:eu-west-1:demo", start_seconds=40)]},
        ["gateway_wake_timeout=60 is shorter than the predicted start of master-b's cluster: 73 s (its instances' boot, "
         "29 s, then its load from the workers' caches, 40.0 s by the load-time model, then 2 health checks 2 s apart): "
         "set it to 73 or more"]),
}


def test_gateway_defaults_pass():
    assert refusals("gateway", GATEWAY, {}) == []
    assert refusals("gateway", GATEWAY, {"gateway_tls_certificate": "/etc/hostname", "gateway_tls_private_key": "/etc/hostname",
                                         "address": "fd00::9"}) == []
    assert refusals("gateway", GATEWAY, {"gateway_wake_timeout": 60, "backends": WAKEABLE}) == []
    assert refusals("gateway", GATEWAY, {"gateway_wake_timeout": 0}) == [], "no wake: no wake socket needed"


@pytest.mark.parametrize("case", sorted(GATEWAY_CASES))
def test_gateway_bad_input_is_refused_by_name_and_no_key_is_shown(case):
    overrides, messages = GATEWAY_CASES[case]
    found = check("gateway", GATEWAY, overrides, messages)
    assert len(found) == sum(message.count(". ") + 1 for message in messages), "%s: a good setting was named: %s" % (case, found)
    for secret in SECRETS:
        assert secret not in " ".join(found), "%s: %r is in the refusal" % (case, secret)


# --- bench --------------------------------------------------------------------------------------------------------
BENCH_CASES = {
    "no prompt sizes": ({"bench_n_prompt": []}, ["bench_n_prompt=[]: list prompt sizes of 0 or more."]),
    "negative generation size": ({"bench_n_gen": [8, -1]}, ["bench_n_gen=[8, -1]: list generation sizes of 0 or more."]),
    "no repetition": ({"bench_repetitions": 0}, ["bench_repetitions=0: set it to 1 or more."]),
    "no TCP bytes": ({"bench_tcp_megabytes": 0}, ["bench_tcp_megabytes=0: set it to 1 or more."]),
    "zero workers": ({"bench_worker_counts": [0, 1]}, ["bench_worker_counts=[0, 1]: list counts of 1 or more"]),
    "more workers than the cluster has": ({"bench_worker_counts": [1, "3"]},
                                          ["bench_worker_counts=[1, '3'] asks for more workers than the cluster has (2): "
                                           "list counts from 1 to 2, or none (1 to all)."]),
    "concurrency of 0 and no tokens": ({"bench_concurrency": [0, 2], "bench_concurrency_tokens": 0},
                                       ["bench_concurrency=[0, 2]: list numbers of clients of 1 or more, or none (no measurement). "
                                        "bench_concurrency_tokens=0: set it to 1 or more."]),
    "no request per client": ({"bench_concurrency_requests": 0}, ["bench_concurrency_requests=0: set it to 1 or more."]),
    "comparison with a missing file": ({"bench_compare_with": "/nonexistent/first.json"},
                                       ["bench_compare_with='/nonexistent/first.json': give an existing result file"]),
}


BENCH = {"worker_total": 2}


def test_bench_defaults_pass(tmp_path):
    assert refusals("bench", BENCH, {}) == []
    first = tmp_path / "first.json"
    first.write_text("{}")
    assert refusals("bench", BENCH, {"bench_compare_with": str(first), "bench_worker_counts": [1, "2"], "bench_concurrency": []}) == []


def test_bench_worker_counts_are_checked_against_the_cluster_only_once_it_is_deployed():
    # No published workers: the role's next check says to deploy first; the counts' own rule still holds.
    assert refusals("bench", {"worker_total": None}, {"bench_worker_counts": [5]}) == []
    assert refusals("bench", {"worker_total": None}, {"bench_worker_counts": [0]}) == [
        "bench_worker_counts=[0]: list counts of 1 or more, or none (1 to all)."]
    assert refusals("bench", {"worker_total": 5}, {"bench_worker_counts": [5, 1]}) == []


@pytest.mark.parametrize("case", sorted(BENCH_CASES))
def test_bench_bad_input_names_only_the_wrong_settings(case):
    overrides, messages = BENCH_CASES[case]
    found = check("bench", BENCH, overrides, messages)
    assert len(found) == sum(message.count("=") for message in messages), "%s: a good setting was named: %s" % (case, found)


# --- rpc_tunnel (one host's settings; the cluster's are the tunnel plan's, test_tunnel_plan.py) ----------------------
TUNNEL_HOST = {"host": "worker-1", "groups": [["master"], ["worker-1"]], "rpc_tunnel_master_group": "llama_master",
               "rpc_tunnel_worker_group": "llama_workers"}

TUNNEL_CASES = {
    "key generation 0": ({"rpc_tunnel_key_generation": 0}, ["rpc_tunnel_key_generation=0: a whole number, 1 or more"]),
    "key generation that is not a number": ({"rpc_tunnel_key_generation": "2b"},
                                            ["rpc_tunnel_key_generation=2b: a whole number, 1 or more"]),
    "key generation that is a fraction": ({"rpc_tunnel_key_generation": 1.5},
                                          ["rpc_tunnel_key_generation=1.5: a whole number, 1 or more"]),
    "an endpoint that is a host name": ({"rpc_tunnel_endpoint_address": "worker.internal"},
                                        ["rpc_tunnel_endpoint_address='worker.internal' is not an IP address"]),
    "a host in neither group": ({"groups": [["master"], ["worker-2"]]},
                                ["worker-1 is in neither the master group 'llama_master' nor the worker group "
                                 "'llama_workers'", "rpc_master_group and rpc_master_worker_group"]),
}


def test_rpc_tunnel_defaults_pass():
    assert refusals("rpc_tunnel", TUNNEL_HOST, {}) == []
    assert refusals("rpc_tunnel", TUNNEL_HOST, {"rpc_tunnel_key_generation": "3", "rpc_tunnel_endpoint_address": "203.0.113.5",
                                                "groups": [["worker-1"], []]}) == []


@pytest.mark.parametrize("case", sorted(TUNNEL_CASES))
def test_rpc_tunnel_bad_input_is_refused_by_name(case):
    overrides, messages = TUNNEL_CASES[case]
    assert len(check("rpc_tunnel", TUNNEL_HOST, overrides, messages)) == 1


# --- llama_build (what to build; the CPU's flags, the archive's contents and the disk are the host's) ---------------
BUILD = {"min_safe_version": 8492}
ARCHIVE = {"llama_build_source": "archive", "llama_build_archive_src": "/srv/llama.tar.gz",
           "llama_build_archive_sha256": "ab" * 32, "llama_build_archive_subdir": "llama.cpp"}

BUILD_CASES = {
    "old pin": ({"llama_build_version": "b8000"}, ["older than b8492", "CVE-2026-34159", "llama_build_allow_vulnerable_version"]),
    "not a release tag": ({"llama_build_version": "latest"}, ["llama_build_version=latest is not a llama.cpp release tag"]),
    "a tag with something after it": ({"llama_build_version": "b11312-rc"}, ["llama_build_version=b11312-rc is not a"]),
    "checksum not hex": (dict(ARCHIVE, llama_build_archive_sha256="abc"),
                         ["llama_build_source=archive needs: llama_build_archive_sha256 (64 hex digits, now 'abc')"]),
    "an archive source without its settings": (
        {"llama_build_source": "archive"},
        ["llama_build_source=archive needs: llama_build_archive_src (empty): set it to the archive's URL or a path on the "
         "controller. llama_build_archive_sha256 (64 hex digits, now ''): set it to the archive's sha256. "
         "llama_build_archive_subdir (empty): set it to the directory with llama.cpp's CMakeLists.txt."]),
}


def test_llama_build_defaults_pass():
    assert refusals("llama_build", BUILD, {}) == []
    assert refusals("llama_build", BUILD, ARCHIVE) == []
    # the archive's settings are not asked for with the git source; an old pin is accepted when the risk is
    assert refusals("llama_build", BUILD, {"llama_build_archive_sha256": "abc"}) == []
    assert refusals("llama_build", BUILD, {"llama_build_version": "b8000", "llama_build_allow_vulnerable_version": True}) == []


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_llama_build_bad_input_is_refused_by_name(case):
    overrides, messages = BUILD_CASES[case]
    assert len(check("llama_build", BUILD, overrides, messages)) == 1


# --- rpc_master (the model's source, parts and checksums are model_source's: test_model_source.py) ------------------
MASTER = {"host": "master", "masters": ["master"], "workers": ["w1", "w2"], "max_workers": 16, "server_address": "10.0.0.2",
          "host_addresses": ["10.0.0.2", "fd00::2"], "host_ipv4": ["10.0.0.2"], "api_key_given": True}

MASTER_CASES = {
    "two masters": ({"masters": ["master", "other-master-1"]},
                    ["The cluster needs exactly one master: group 'llama_master' holds master, other-master-1 and this "
                     "play runs the role on master"]),
    "the master not in its group": ({"masters": []}, ["group 'llama_master' holds no hosts and this play runs the role on master"]),
    "no workers": ({"workers": []}, ["holds 0 hosts; a llama.cpp master uses 1 to 16 RPC workers"]),
    "more than 16 workers": ({"workers": ["w%d" % index for index in range(17)]},
                             ["holds 17 hosts; a llama.cpp master uses 1 to 16"]),
    "two sizes out of range, in the order of the role's variables": (
        {"rpc_master_server_parallel": 0, "rpc_master_server_port": 70000},
        ["Out of range: rpc_master_server_port=70000: set it from 1 to 65535. rpc_master_server_parallel=0: set it "
         "to 1 or more (slots)."]),
    "memory fraction above 1": ({"rpc_master_memory_fraction": 1.5},
                                ["Out of range: rpc_master_memory_fraction=1.5: set it above 0 and at most 1."]),
    "memory fraction that is not a number": ({"rpc_master_memory_fraction": "most"},
                                             ["rpc_master_memory_fraction=most: set it above 0 and at most 1."]),
    "a negative context and a probe timeout of 0": (
        {"rpc_master_context_size": -1, "rpc_master_probe_timeout": 0},
        ["Out of range: rpc_master_context_size=-1: set it to 0 (the model's) or more. rpc_master_probe_timeout=0: set it "
         "above 0 (seconds)."]),
    "threads of 0": ({"rpc_master_threads": 0}, ["rpc_master_threads=0: set it to 1 or more, or null"]),
    "download bounds of 0": ({"rpc_master_model_download_timeout": 0, "rpc_master_model_read_timeout": 0,
                              "rpc_master_model_download_attempts": 0, "rpc_master_model_download_parallel": 0},
                             ["rpc_master_model_download_timeout=0: set it to 1 second or more. rpc_master_model_read_timeout=0: "
                              "set it to 1 second or more. rpc_master_model_download_attempts=0: set it to 1 or more. "
                              "rpc_master_model_download_parallel=0: set it to 1 or more (parts at once)."]),
    "a negative count of kept models": ({"rpc_master_models_kept": -1},
                                        ["Out of range: rpc_master_models_kept=-1: set it to 0 (only the served model) or "
                                         "more (models kept for a rollback)."]),
    "an unbounded prompt cache": ({"rpc_master_server_cache_ram_mib": -1},
                                  ["rpc_master_server_cache_ram_mib=-1: set it to 0 (no prompt cache) or more MiB; an "
                                   "unbounded cache (-1) cannot be planned."]),
    "watchdog interval of 0": ({"rpc_master_watchdog_interval": 0}, ["rpc_master_watchdog_interval=0: set it to 1 second or more."]),
    "a negative idle stop": ({"rpc_master_idle_stop_minutes": -5},
                             ["rpc_master_idle_stop_minutes=-5: set it to 0 (never) or more minutes."]),
    "an idle stop that is no number": ({"rpc_master_idle_stop_minutes": "half an hour"},
                                       ["rpc_master_idle_stop_minutes=half an hour: set it to 0 (never) or more minutes."]),
    "an idle stop shorter than two checks": ({"rpc_master_idle_stop_minutes": 0.1},
                                             ["rpc_master_idle_stop_minutes=0.1 is shorter than two of the watchdog's "
                                              "checks (rpc_master_watchdog_interval=5 s): set it to 0.17 or more."]),
    "an idle stop without the server's figures": ({"rpc_master_idle_stop_minutes": 30, "rpc_master_server_metrics": False,
                                                   "rpc_master_watchdog_enabled": False},
                                                  ["The idle stop reads llama-server's /metrics: set "
                                                   "rpc_master_server_enabled and rpc_master_server_metrics to true"]),
    "an idle stop on AWS with no region": ({"rpc_master_idle_stop_minutes": 30, "idle_stop_driver": "aws",
                                            "idle_stop_region": ""},
                                           ["The idle stop of an AWS master needs its region", "placement.region"]),
    "an idle stop with checks every 0 s": ({"rpc_master_idle_stop_minutes": 30, "rpc_master_watchdog_enabled": False,
                                            "rpc_master_watchdog_interval": 0},
                                           ["rpc_master_watchdog_interval=0: set it to 1 second or more (the idle stop's "
                                            "checks)."]),
    "a wake port out of range": ({"rpc_master_wake_port": 70000},
                                 ["rpc_master_wake_port=70000: set it from 1 to 65535 (the wake socket), or 0 (none)."]),
    "a wake port that is llama-server's": ({"rpc_master_wake_port": 8080},
                                           ["rpc_master_wake_port=8080 is llama-server's own port (rpc_master_server_port)"]),
    "a wake port without the server": ({"rpc_master_wake_port": 8091, "rpc_master_server_enabled": False,
                                        "api_key_given": False},
                                       ["rpc_master_wake_port=8091 starts llama-server, which rpc_master_server_enabled: "
                                        "false leaves out"]),
    "watchdog without metrics": ({"rpc_master_server_metrics": False},
                                 ["The watchdog asks llama-server's /metrics", "set rpc_master_server_metrics: true"]),
    "empty API key with the server enabled": ({"api_key_given": False},
                                              ["llama-server needs rpc_master_server_api_key", "Ansible Vault",
                                               "Or set rpc_master_server_enabled: false."]),
    "server on every interface": ({"server_address": "0.0.0.0"}, ["never 0.0.0.0", "set rpc_master_server_bind_address"]),
    "server on an address of another host": ({"server_address": "10.0.0.77"},
                                             ["llama-server binds to an address of this host (10.0.0.2, fd00::2 or 127.0.0.1; "
                                              "got '10.0.0.77', never 0.0.0.0)"]),
    "server address that is a host name": ({"server_address": "master.internal"},
                                           ["rpc_master_server_bind_address='master.internal' is not an IP address"]),
    "no address for the server": ({"server_address": ""},
                                  ["master has no default route to take its private address from: set it to one of "
                                   "10.0.0.2, or 127.0.0.1"]),
    "missing prompt file": ({"rpc_master_infer": True, "rpc_master_infer_prompt_file": "/nonexistent/prompt.txt"},
                            ["One-shot inference: rpc_master_infer_prompt_file: /nonexistent/prompt.txt does not exist"]),
    "a prompt and a prompt file": ({"rpc_master_infer": True, "rpc_master_infer_prompt": "Hi",
                                    "rpc_master_infer_prompt_file": "/etc/hostname"},
                                   ["One-shot inference: set exactly one of rpc_master_infer_prompt and "
                                    "rpc_master_infer_prompt_file"]),
    "infer tokens of 0": ({"rpc_master_infer": True, "rpc_master_infer_prompt": "Hi", "rpc_master_infer_tokens": 0},
                          ["One-shot inference: rpc_master_infer_tokens=0: set it to 1 or more."]),
}


def test_rpc_master_defaults_pass():
    assert refusals("rpc_master", MASTER, {}) == []
    assert refusals("rpc_master", MASTER, {"server_address": "127.0.0.1", "rpc_master_threads": "8",
                                           "rpc_master_memory_fraction": "1", "rpc_master_context_size": 0}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_infer": True, "rpc_master_infer_prompt_file": "/etc/hostname"}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_idle_stop_minutes": "0.25", "idle_stop_driver": "aws",
                                           "idle_stop_region": "eu-west-1"}) == []
    # without llama-server, its settings are not asked for (the one-shot inference stands alone)
    assert refusals("rpc_master", MASTER, {"rpc_master_server_enabled": False, "api_key_given": False,
                                           "server_address": "0.0.0.0", "rpc_master_watchdog_interval": 0}) == []


@pytest.mark.parametrize("case", sorted(MASTER_CASES))
def test_rpc_master_bad_input_names_only_what_is_wrong(case):
    overrides, messages = MASTER_CASES[case]
    assert len(check("rpc_master", MASTER, overrides, messages)) == 1


# --- the argument specs: what they refuse, before any rule here runs -------------------------------------------------
@pytest.mark.parametrize("role, settings, message", [
    ("llama_build", {"llama_build_source": "svn"}, "llama_build_source must be one of: git, archive"),
    ("rpc_worker", {"rpc_worker_port": "http"}, "rpc_worker_port"),
    ("rpc_master", {"rpc_master_server_parallel": "four"}, "rpc_master_server_parallel"),
])
def test_the_argument_spec_refuses_by_name(role, settings, message):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    result = ArgumentSpecValidator(spec).validate(settings)
    assert any(message in error for error in result.error_messages), result.error_messages


# --- aws_infra (what only AWS knows, such as the key pair and the region's types, is the account's) ------------------
AWS = {"aws_infra_region": "us-east-1", "aws_infra_cluster_name": "bad-input", "aws_infra_admin_cidr": "198.51.100.7/32",
       "aws_infra_key_name": "molecule-key", "aws_infra_rpc_port": 50099, "max_workers": 16}

# Each address input, parsed: these all passed the old pattern (or were never checked) and reached AWS, which
# rewrote them into other networks or failed after the VPC existed. Each message names the variable and the fix.
AWS_CASES = {
    "octet above 255": ({"aws_infra_admin_cidr": "300.51.100.7/32"},
                        "aws_infra_admin_cidr='300.51.100.7/32' is not an IP network: Octet 300 (> 255) not permitted"),
    "prefix above 32": ({"aws_infra_admin_cidr": "198.51.100.7/33"}, "an IPv4 prefix length is 0 to 32"),
    "host bits set": ({"aws_infra_admin_cidr": "198.51.100.7/24"},
                      "for this address alone write 198.51.100.7/32, for the whole network 198.51.100.0/24"),
    "no prefix": ({"aws_infra_admin_cidr": "198.51.100.7"}, "for this address alone write 198.51.100.7/32"),
    "IPv6 admin network": ({"aws_infra_admin_cidr": "2001:db8::/64"}, "aws_infra_admin_cidr='2001:db8::/64' is IPv6; the VPC has IPv4 only"),
    "VPC block too large": ({"aws_infra_vpc_cidr": "10.0.0.0/8"}, "aws_infra_vpc_cidr='10.0.0.0/8': a VPC takes an IPv4 block from /16 to /28"),
    "VPC with host bits": ({"aws_infra_vpc_cidr": "10.42.0.1/16"}, "aws_infra_vpc_cidr='10.42.0.1/16' is not an IP network"),
    "subnet outside the VPC": ({"aws_infra_public_subnet_cidr": "10.43.0.0/24"},
                               "aws_infra_public_subnet_cidr=10.43.0.0/24 is not inside aws_infra_vpc_cidr=10.42.0.0/16"),
    "public source for llama-server": ({"aws_infra_server_allowed_sources": ["10.42.0.0/16", "52.94.0.0/16"]},
                                       "aws_infra_server_allowed_sources entry '52.94.0.0/16' is public; llama-server "
                                       "speaks plain HTTP"),
    "llama-server open to the world": ({"aws_infra_server_allowed_sources": ["0.0.0.0/0"]},
                                       "aws_infra_server_allowed_sources entry '0.0.0.0/0' is public"),
    "server port on the RPC port": ({"aws_infra_server_port": 50099},
                                    "aws_infra_server_port=50099: set it from 1 to 65535, other than SSH (22) and the RPC port."),
    "overlapping subnets": ({"aws_infra_private_subnet_cidr": "10.42.0.0/25"},
                            "aws_infra_private_subnet_cidr=10.42.0.0/25 overlaps aws_infra_public_subnet_cidr=10.42.0.0/24"),
    "no workers": ({"aws_infra_worker_count": 0}, "aws_infra_worker_count from 1 to 16"),
    "17 workers": ({"aws_infra_worker_count": 17}, "aws_infra_worker_count from 1 to 16"),
    "SSH from anywhere without the opt-in": ({"aws_infra_admin_cidr": "0.0.0.0/0"}, "aws_infra_ssh_from_anywhere: true"),
    "no admin CIDR": ({"aws_infra_admin_cidr": ""}, "aws_infra_admin_cidr is empty: set it to the addresses that may reach SSH"),
    "volume throughput above gp3's": ({"aws_infra_volume_throughput_mib_s": 2000},
                                      "aws_infra_volume_throughput_mib_s=2000: gp3 takes 125 to 1000."),
    "IOPS above gp3's": ({"aws_infra_volume_iops": 20000}, "aws_infra_volume_iops=20000: gp3 takes 3000 to 16000."),
    "throughput the IOPS cannot carry": ({"aws_infra_volume_throughput_mib_s": 1000, "aws_infra_volume_iops": 3000},
                                         "set aws_infra_volume_iops to at least 4000"),
    "no region": ({"aws_infra_region": ""}, "aws_infra_region is empty: set the region"),
    "a cluster name with capitals": ({"aws_infra_cluster_name": "My-Cluster"},
                                     "aws_infra_cluster_name='My-Cluster': use 3 to 32 lowercase letters"),
    "no key pair": ({"aws_infra_key_name": ""}, "aws_infra_key_name is empty: set it to the name of an EC2 key pair in us-east-1"),
    "a VPC without its subnet": ({"aws_infra_vpc_id": "vpc-0123456789abcdef0"}, "aws_infra_vpc_id and aws_infra_subnet_id: set both"),
    "RPC port 0": ({"aws_infra_rpc_port": 0}, "aws_infra_rpc_port=0: set it from 1 to 65535."),
    "server port on SSH's": ({"aws_infra_server_port": 22}, "aws_infra_server_port=22: set it from 1 to 65535, other than SSH"),
}


def test_aws_infra_defaults_pass():
    assert refusals("aws_infra", AWS, {}) == []
    assert refusals("aws_infra", AWS, {"aws_infra_admin_cidr": "0.0.0.0/0", "aws_infra_ssh_from_anywhere": True,
                                       "aws_infra_server_allowed_sources": ["10.42.0.0/16", "192.168.4.0/24"],
                                       "aws_infra_vpc_id": "vpc-1", "aws_infra_subnet_id": "subnet-1",
                                       "aws_infra_volume_throughput_mib_s": 125, "aws_infra_volume_iops": 3000}) == []


@pytest.mark.parametrize("case", sorted(AWS_CASES))
def test_aws_infra_bad_input_is_refused_by_name(case):
    overrides, message = AWS_CASES[case]
    assert len(check("aws_infra", AWS, overrides, [message])) == 1


def test_aws_infra_names_only_the_wrong_inputs_in_the_order_they_are_set():
    found = refusals("aws_infra", AWS, {"aws_infra_admin_cidr": "198.51.100.7", "aws_infra_private_subnet_cidr": "10.50.1.0/24",
                                        "aws_infra_worker_count": 20})
    text = " ".join(found)
    wrong = ["aws_infra_admin_cidr='198.51.100.7' is not an IP network", "aws_infra_private_subnet_cidr=10.50.1.0/24 is not inside",
             "aws_infra_worker_count=20: set aws_infra_worker_count from 1 to 16"]
    where = [text.find(message) for message in wrong]
    assert len(found) == 3 and -1 not in where and where == sorted(where), (where, text)


# aws_infra's teardown (tasks_from: teardown.yml) finds the cluster by region and name alone: provisioning's rules for
# the two, so a name provisioning would refuse is never looked for, and nothing else is asked.
TEARDOWN_CASES = {
    "no region": ({"aws_infra_region": ""}, ["aws_infra_region is empty: set the region of the cluster to delete"]),
    "no cluster name": ({"aws_infra_cluster_name": ""}, ["aws_infra_cluster_name='': use 3 to 32 lowercase letters"]),
    "a cluster name with capitals": ({"aws_infra_cluster_name": "My-Cluster"},
                                     ["aws_infra_cluster_name='My-Cluster': use 3 to 32 lowercase letters"]),
    "a cluster name ending in a dash": ({"aws_infra_cluster_name": "demo-"}, ["aws_infra_cluster_name='demo-'"]),
    "a cluster name of 33 characters": ({"aws_infra_cluster_name": "a" * 33}, ["aws_infra_cluster_name='%s'" % ("a" * 33)]),
    "neither": ({"aws_infra_region": "", "aws_infra_cluster_name": "x"},
                ["aws_infra_region is empty", "aws_infra_cluster_name='x'"]),
}


def test_aws_infra_teardown_asks_only_for_region_and_name():
    good = {"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}
    assert input_problems(good, "aws_infra_teardown") == []
    assert input_problems(dict(good, aws_infra_cluster_name="abc"), "aws_infra_teardown") == []
    assert input_problems(dict(good, aws_infra_cluster_name="a" * 32), "aws_infra_teardown") == []


@pytest.mark.parametrize("overrides, message", [
    ({}, None),
    ({"aws_infra_power": "running"}, None),
    ({"aws_infra_power": "paused"}, "aws_infra_power='paused': set it to stopped or running (playbooks/stop.yml and "
                                    "start.yml do)."),
    ({"aws_infra_region": ""}, "aws_infra_region is empty: set the region of the cluster to stop or start"),
    ({"aws_infra_cluster_name": "Llama"}, "aws_infra_cluster_name='Llama': use 3 to 32 lowercase letters"),
])
def test_aws_infra_power_asks_for_region_name_and_state(overrides, message):
    settings = dict({"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b", "aws_infra_power": "stopped"},
                    **overrides)
    problems = input_problems(settings, "aws_infra_power")
    assert (problems == []) if message is None else (len(problems) == 1 and message in problems[0]), problems


@pytest.mark.parametrize("case", sorted(TEARDOWN_CASES))
def test_aws_infra_teardown_bad_input_is_refused_by_name(case):
    overrides, messages = TEARDOWN_CASES[case]
    found = input_problems(dict({"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}, **overrides),
                           "aws_infra_teardown")
    assert len(found) == len(messages), found
    for message in messages:
        assert message in " ".join(found), (message, found)


def test_aws_infra_teardown_and_provisioning_refuse_the_same_names():
    """One rule for the name: whatever provisioning refuses, teardown refuses, in the same words."""
    for name in ("", "ab", "My-Cluster", "9lives", "demo-", "a_b", "a" * 33, "llama70b", "a-b"):
        provision = [p for p in refusals("aws_infra", AWS, {"aws_infra_cluster_name": name}) if "cluster_name" in p]
        teardown = input_problems({"aws_infra_region": "us-east-1", "aws_infra_cluster_name": name}, "aws_infra_teardown")
        assert provision == teardown, (name, provision, teardown)


# --- every port, at its bounds ------------------------------------------------------------------------------------
PORTS = [("rpc_worker", WORKER, "rpc_worker_port"), ("gateway", GATEWAY, "gateway_port"),
         ("rpc_master", MASTER, "rpc_master_server_port"), ("rpc_tunnel", TUNNEL_HOST, "rpc_tunnel_port"),
         ("aws_infra", AWS, "aws_infra_rpc_port"), ("aws_infra", AWS, "aws_infra_server_port")]


@pytest.mark.parametrize("role, context, setting", PORTS, ids=[setting for _role, _context, setting in PORTS])
def test_every_port_takes_1_to_65535_and_nothing_beyond(role, context, setting):
    for port in (1, 65535):
        assert refusals(role, context, {setting: port}) == [], (setting, port)
    for port in (0, 65536):
        found = " ".join(refusals(role, context, {setting: port}))
        assert f"{setting}={port}" in found and "65535" in found, (setting, port, found)
