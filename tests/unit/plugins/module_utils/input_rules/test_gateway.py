"""The input rules of gateway (module_utils/input_rules/gateway.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

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
        ["gateway_wake_timeout=60 is shorter than the predicted start of master-b's cluster: 65 s (its instances' "
         "start, 21 s, then its load from the workers' caches, 40.0 s by the load-time model, then 2 health checks 2 s "
         "apart): set it to 66 or more"]),
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
