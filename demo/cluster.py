"""The local cluster of make demo: start (or find) a master and two workers, put the demo model on the
master. Names and groups match inventories/local/hosts.yml.

    python -m demo.cluster up MODEL_DIR
    python -m demo.cluster first-load-model MODEL_DIR   (prints the model's path on the master)
    python -m demo.cluster has-tun                       (exit 0 when every container has the TUN device)
    python -m demo.cluster stop|start                    (its containers, kept with everything in them)
    python -m demo.cluster state                         (prints running, stopped, partly running or absent)
    python -m demo.cluster down
"""

import hashlib
import os
import sys
import time
from pathlib import Path

import docker
import yaml

from tests.tools import containers, tiny_model

ROOT = Path(__file__).resolve().parents[1]
NETWORK = "llama-demo"
IMAGE = {"llama-demo-master": "llama-rpc-testbed:bookworm", "llama-demo-worker-1": "llama-rpc-testbed:bookworm",
         "llama-demo-worker-2": "llama-rpc-testbed:trixie"}


def names():
    inventory = yaml.safe_load((ROOT / "inventories" / "local" / "hosts.yml").read_text())
    return list(inventory["llama_master"]["hosts"]) + list(inventory["llama_workers"]["hosts"])


def up(model_dir):
    client = docker.from_env()
    for name in names():
        if client.containers.list(all=True, filters={"name": f"^{name}$"}):
            container = client.containers.get(name)
            if container.status != "running":
                container.start()
                containers.wait_until_booted(container)
            print(f"{name}: already there")
            continue
        # NET_ADMIN: the workers' nftables firewall; the TUN device: wireguard-go, for the WireGuard tunnel (make
        # bench-tunnel; this kernel may have no WireGuard). The compiler cache of the image's release is shared.
        ccache = Path(os.environ["LLAMA_RPC_BUILD_CACHE"]) / ("ccache-" + IMAGE[name].split(":")[1])
        containers.start_host(client, name, NETWORK, image=IMAGE[name], extra_caps=["NET_ADMIN"], devices=[containers.TUN],
                              volumes={str(ccache): {"bind": "/var/cache/llama.cpp/ccache", "mode": "rw"}})
        print(f"{name}: started ({IMAGE[name]})")
    model = Path(model_dir) / f"demo-{tiny_model.GENERATION}.gguf"
    if not model.exists():
        # About 250 MB: big enough that the workers' tensor cache (tensors over 10 MiB) matters to make bench.
        tiny_model.write_model(model, embd=1024, layers=4, ff=4096, heads=16, kv_heads=4, context=1024)
    master = client.containers.get(names()[0])
    place_model(master, model, "/srv/models/demo.gguf")
    print(f"demo model: {model.stat().st_size / 1e6:.1f} MB of random weights on {master.name}:/srv/models/demo.gguf")


FIRST_LOAD_MODEL = "/srv/models/first-load.gguf"


def place_model(master, model, path):
    """Copies model to path on the master unless the same file is there (an earlier generation is replaced)."""
    with open(model, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    there = master.exec_run(["sha256sum", path]).output.decode().split(" ")[0]
    if there != digest:
        master.exec_run(["mkdir", "-p", str(Path(path).parent)])
        master.put_archive(str(Path(path).parent), containers.tar_of(model, Path(path).name))


def first_load_model(model_dir):
    """The first-load benchmark's model on the master: like a 70B's, nearly all its weights are in tensors over
    10 MiB (every matrix, no grouped KV heads), which travel by hash; the demo model has 18% in smaller ones."""
    model = Path(model_dir) / f"first-load-{tiny_model.GENERATION}.gguf"
    if not model.exists():
        tiny_model.write_model(model, embd=2048, layers=4, ff=8192, heads=16, kv_heads=16, context=1024)
    place_model(docker.from_env().containers.get(names()[0]), model, FIRST_LOAD_MODEL)
    print(FIRST_LOAD_MODEL)


def has_tun():
    """Whether every demo container has the TUN device (containers of make demo before make bench-tunnel existed have not)."""
    client = docker.from_env()
    return all(client.containers.get(name).exec_run(["test", "-c", "/dev/net/tun"]).exit_code == 0 for name in names())


def power(state):
    """make demo-stop and demo-start: the containers stopped or started, the master first (start.yml then waits for
    llama-server); everything in them stays."""
    client = docker.from_env()
    hosts = [client.containers.get(name) for name in names()]
    if state == "stop":
        containers.stop_cluster(hosts)
    else:
        containers.start_cluster(hosts)
    print(f"{state}: {', '.join(container.name for container in hosts)}")


def state():
    """The local cluster's containers: running (all), stopped (all), partly running, or absent (none made, or not all)."""
    client = docker.from_env()
    found = [client.containers.list(all=True, filters={"name": f"^{name}$"}) for name in names()]
    if not all(found):
        return "absent"
    running = [match[0].status == "running" for match in found]
    return "running" if all(running) else "stopped" if not any(running) else "partly running"


def first_token(key_file):
    """Seconds until llama-server on the master gives one token (asked once it answers /health), from now; the
    request runs on the master, at the address and with the key its unit reads."""
    from tests.tools import llama_cpp  # pylint: disable=import-outside-toplevel
    master = docker.from_env().containers.get(names()[0])
    url = llama_cpp.container_server_url(master)
    key = Path(key_file).read_text().strip()
    began = time.monotonic()
    while time.monotonic() - began < 900:
        status, _body = llama_cpp.answer(containers.run(master, llama_cpp.request_on_master(
            url + "/completion", key, {"prompt": "Hello", "n_predict": 1, "cache_prompt": False}))[1].decode())
        if status == 200:
            return time.monotonic() - began
        time.sleep(0.5)
    raise SystemExit("llama-server gave no token within 900 s")


def empty_worker_caches():
    """The workers' tensor caches emptied: the next load stores every hashed tensor again (a first deploy)."""
    client = docker.from_env()
    for name in names()[1:]:
        containers.checked_sh(client.containers.get(name), "rm -f /var/cache/llama-rpc-worker/*/rpc/*")


def down():
    client = docker.from_env()
    found = [client.containers.get(name) for name in names() if client.containers.list(all=True, filters={"name": f"^{name}$"})]
    containers.remove(client, found, NETWORK)
    print(f"removed {len(found)} containers and the network {NETWORK}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["up"]:
        up(sys.argv[2])
    elif sys.argv[1:2] == ["first-token"]:
        print("%.1f" % first_token(sys.argv[2]))
    elif sys.argv[1:2] == ["empty-worker-caches"]:
        empty_worker_caches()
    elif sys.argv[1:2] == ["first-load-model"]:
        first_load_model(sys.argv[2])
    elif sys.argv[1:2] == ["has-tun"]:
        sys.exit(0 if has_tun() else 1)
    elif sys.argv[1:2] in (["stop"], ["start"]):
        power(sys.argv[1])
    elif sys.argv[1:2] == ["state"]:
        print(state())
    elif sys.argv[1:2] == ["down"]:
        down()
    else:
        sys.exit(__doc__)
