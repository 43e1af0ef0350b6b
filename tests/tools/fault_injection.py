"""What the fault tests (molecule/cluster/tests/test_master.py) and make bench-faults (tests/bench/faults.py) share:
the faults that stall a worker, and one client request that says how it ended.

A fault takes `run`, a function that runs a shell command on the worker (testinfra's check_output, or docker exec),
and returns what ends it."""

import http.client
import json
import urllib.error
import urllib.request

WORKER_UNIT = "llama-rpc-worker@main.service"
FAULT_TABLE = "llama_rpc_fault_test"  # an nftables table of the tests' own, beside the worker's firewall


def freeze(run, _master_address):
    """The worker's process stopped (SIGSTOP) until the fault ends."""
    run(f"systemctl kill -s STOP {WORKER_UNIT}")
    return lambda: run(f"systemctl kill -s CONT {WORKER_UNIT}")


def drop_every_packet(run, master_address):
    """The path between the master and this worker drops every packet, both ways."""
    table = f"inet {FAULT_TABLE}"
    run(f"nft add table {table}")
    for chain, match in (("input", "saddr"), ("output", "daddr")):
        run(f"nft add chain {table} {chain} '{{ type filter hook {chain} priority -50; }}'")
        run(f"nft add rule {table} {chain} ip {match} {master_address} drop")
    return lambda: run(f"nft delete table {table}")


def complete(url, key, n_predict=48, stream=True, timeout=120):
    """One completion from llama-server; how it ended: ok, closed (a stream cut short), http NNN, or the error's name.
    The timeout is far above any bound asserted, so a hang shows as a wait, not as a stuck test."""
    body = json.dumps({"prompt": "Once upon a time", "n_predict": n_predict, "stream": stream, "cache_prompt": False})
    request = urllib.request.Request(url + "/completion", data=body.encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            text = reply.read().replace(b" ", b"")
    except urllib.error.HTTPError as error:
        return f"http {error.code}"
    except (OSError, http.client.HTTPException) as error:
        return type(error).__name__
    # a whole streamed answer ends with an event that says "stop": true; a non-streamed one is one such object
    return "ok" if b'"stop":true' in text else "closed"
