"""The load-time model against the published multi-node loads, and what it predicts for the AWS defaults.

Inputs are the published runs' hardware (sourced in the README) and this machine's measured constants
(load_time.FIGURES); nothing here is fitted to the published times."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils import load_time

GIB, MIB = 1 << 30, 1 << 20
Q4_0 = 18 / 32  # bytes per weight: 32 weights in a block of 18 bytes


def llama_70b_q4_0():
    """Llama 3.1 70B Q4_0 (37.2 GiB file): 80 layers, embedding 8192, 8 KV heads of 128, vocabulary 128256.
    The token embeddings stay on the master; attn_k and attn_v (8192 x 1024) are under 10 MiB and always travel."""
    token_embd = 128256 * 8192 * Q4_0
    sent = 37.2 * GIB - token_embd
    small = 80 * 2 * 8192 * 1024 * Q4_0 + 80 * 2 * 8192 * 4  # attn_k, attn_v, the norms
    return sent, sent - small, 80 * 9 + 2


def gp3_worker(share, memory_gib=32, rate_mib=125):
    return {"bytes": share, "memory": memory_gib * GIB, "disk_read": rate_mib * MIB, "disk_write": rate_mib * MIB}


def reference_70b(state="cold", network=load_time.figure("flow_rate")):
    """3 x c8g.4xlarge (32 GiB each), default gp3 (125 MiB/s), workers with -c, no placement group: the master's 32 GiB
    cannot keep the 37.2 GiB model in its page cache, so it reads it from its volume."""
    sent, hashed, tensors = llama_70b_q4_0()
    return load_time.predict(sent, hashed, tensors, [gp3_worker(sent / 2)] * 2, {"disk_read": 125 * MIB, "cached_bytes": 0},
                             network, state)


def test_the_reference_70b_load_is_explained_within_30_percent():
    predicted = reference_70b()
    print(f"70B reference: predicted {predicted['seconds']} s against 489.5 s published, bound by {predicted['bound']}: "
          f"{predicted['parts']}")
    assert 0.7 <= predicted["seconds"] / 489.5 <= 1.3
    assert predicted["bound"] == "the master's model read (its disk)"


def reference_405b(flow_gbps):
    """Llama 3.1 405B Q4_0 (405.9e9 weights, about 228 GB) on 3 x c8g.16xlarge (128 GiB each): larger than any node's
    page cache."""
    sent = 405.9e9 * Q4_0
    hashed = sent * 0.985
    return load_time.predict(sent, hashed, 126 * 9 + 2, [gp3_worker(sent / 2, memory_gib=128)] * 2,
                             {"disk_read": 125 * MIB, "cached_bytes": 0}, flow_gbps * 1e9 / 8, "cold")


def test_the_405b_load_reported_at_about_30_minutes():
    """Whether that run used a placement group is not said. Inside one (10 Gbps per flow) the model is within 30% of the
    reported figure; outside one (5 Gbps) it is 34% slow, outside the band: the README says so."""
    inside, outside = reference_405b(10), reference_405b(5)
    for flow, predicted in ((10, inside), (5, outside)):
        print(f"405B at {flow} Gbps per flow: predicted {predicted['seconds'] / 60:.1f} min against about 30 min "
              f"({predicted['seconds'] / 1800:.2f}x), bound by {predicted['bound']}")
    assert 0.7 <= inside["seconds"] / 1800 <= 1.3
    assert inside["bound"] == outside["bound"] == "the master's model read (its disk)"


def test_staged_caches_and_the_aws_defaults_bring_the_70b_first_load_under_a_minute():
    """The defaults the README recommends: the master holds the model in its page cache (c8g.8xlarge, 64 GiB, the model
    read once before the load), the workers' caches on gp3 at 1,000 MiB/s, a cluster placement group (10 Gbps)."""
    sent, hashed, tensors = llama_70b_q4_0()
    workers = [gp3_worker(sent / 2, rate_mib=1000)] * 2
    master = {"disk_read": 1000 * MIB, "cached_bytes": sent}
    staged = load_time.predict(sent, hashed, tensors, workers, master, load_time.figure("flow_rate_placement_group"), "staged")
    print(f"70B staged with the recommended defaults: {staged}")
    assert staged["seconds"] <= 60
    assert staged["bound"] == "the master's hashing (FNV-1a on one core)"
    assert staged["bytes_sent"] <= 0.05 * sent
    # Staging alone, without the master's page cache, does not get there: the master's volume is then the bound.
    from_disk = load_time.predict(sent, hashed, tensors, workers, {"disk_read": 1000 * MIB, "cached_bytes": 0},
                                  load_time.figure("flow_rate_placement_group"), "staged")
    print(f"70B staged, master reading from its volume at 1,000 MiB/s: {from_disk}")
    assert from_disk["seconds"] > 60


def test_every_figure_names_its_source():
    for name, (value, unit, source) in load_time.FIGURES.items():
        assert value > 0 and unit and ("measured here" in source or "https://" in source or "same page" in source), name


def test_states_are_checked():
    with pytest.raises(ValueError, match="state must be"):
        reference_70b(state="lukewarm")
