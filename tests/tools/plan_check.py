"""The plan's figures per node (gguf_plan, as rpc_master deploys it) against the buffers llama.cpp logged for the same
load (llama_log.buffers): weights within 1%, caches within 2%, compute buffers not below llama.cpp's and within 15%.
One place for the bounds, used by the cluster scenario's family test and by make families (deploy.yml)."""

MIB = 1 << 20


def node_buffers(node_name, logged):
    """What llama.cpp logged for one node of a plan: the master is every CPU device of the master's process."""
    if node_name == "master":
        devices = [device for device in logged if device.startswith("CPU")]
        return {kind: sum(logged[device].get(kind, 0) for device in devices) for kind in ("model", "KV", "RS", "compute")}
    return logged.get(node_name, {})


def compare(planned, logged, label):
    """Prints one line per node (plan / llama.cpp) and returns the problems (empty when every bound holds)."""
    problems = []
    for node in planned["workers"] + [planned["master"]]:
        seen = node_buffers(node["name"], logged)
        weights, caches, compute = seen.get("model", 0), seen.get("KV", 0) + seen.get("RS", 0), seen.get("compute", 0)
        print(f"{label:18s} {node['name']:>20s}: weights {node['weights_bytes'] / MIB:8.2f} / {weights / MIB:8.2f} MiB,"
              f" caches {node['kv_estimate_bytes'] / MIB:6.2f} / {caches / MIB:6.2f}, compute {node['compute_bytes'] / MIB:6.2f}"
              f" / {compute / MIB:6.2f} (plan / llama.cpp)", flush=True)
        # the master's weights are llama.cpp's projection (it repacks some types for the CPU): whole MiB, rounded up
        slack = 1.01 * MIB if node["name"] == "master" else 0.01 * MIB
        if abs(node["weights_bytes"] - weights) > 0.01 * weights + slack:
            problems.append(f"{label} {node['name']}: weights {node['weights_bytes']} planned, {weights} loaded")
        if abs(node["kv_estimate_bytes"] - caches) > 0.02 * caches + 0.01 * MIB:
            problems.append(f"{label} {node['name']}: caches {node['kv_estimate_bytes']} planned, {caches} loaded")
        # llama.cpp's projection rounds up to the MiB, and was seen 2 MiB above what the load then took on the output
        # layer's worker of a model this small (10.08 MiB against 12): an absolute slack beside the 15%
        if not compute <= node["compute_bytes"] <= 1.15 * compute + 2.5 * MIB:
            problems.append(f"{label} {node['name']}: compute {node['compute_bytes']} planned, {compute} loaded")
    return problems
