"""The graviton_types lookup: the C8g types' memory and price, held once for aws_infra (through the lookup) and
gguf_plan (directly)."""

from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.lookup.graviton_types import LookupModule

ROLES = Path(__file__).resolve().parents[4] / "roles"


def test_the_table_is_smallest_first_and_the_one_aws_infra_reads():
    lookup = LookupModule()
    lookup._load_name = "graviton.llama_rpc.graviton_types"  # what the plugin loader sets (ansible-core 2.17 needs it)
    types = lookup.run([])
    assert types[0] == {"name": "c8g.medium", "memory_gib": 2, "usd_per_hour": 0.03988}
    assert types[-1]["name"] == "c8g.48xlarge" and types[-1]["memory_gib"] == 384
    # C8g has 2 GiB per vCPU, and its price grows with its size.
    memories = [entry["memory_gib"] for entry in types]
    prices = [entry["usd_per_hour"] for entry in types]
    assert memories == sorted(memories) and prices == sorted(prices)
    # aws_infra keeps no table of its own: memory and prices come from the lookup.
    aws_vars = (ROLES / "aws_infra" / "vars" / "main.yml").read_text()
    assert "query('graviton.llama_rpc.graviton_types')" in aws_vars and "c8g.8xlarge:" not in aws_vars
