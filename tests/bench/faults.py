"""Benchmark: the faults of issue 15, one at a time, against the local cluster (make demo's) under load, and an
upgrade of the whole cluster to another llama.cpp build and back.

Three clients stream completions from llama-server (from this machine, with the demo's API key) the whole time.
Each fault is injected on the second worker or on the master, held, and ended; then the bench waits until a request
made after the fault's end is answered whole. Per fault it prints:

- the longest wait of a request in flight during the fault, counted from the fault's start (or the request's own, if
  later) to its end (an answer, an HTTP error or a closed stream): the watchdog's bound is its interval + timeout
  + llama-server's TimeoutStopSec (inventories/local: 2 + 10 + 5 s);
- the requests that failed (an error or a stream cut short) from the fault's start until the server served again;
- the time from the fault's end to the end of the first whole answer to a request made after it;
- the files changed or removed on disk (model, builds, configuration and secrets, units, the workers' tensor caches;
  sha256 of each before and after: must be 0), and files added (only cache files written whole may be);
- what a re-run of site.yml then changes (must be 0) and how long it took.

Then the upgrade: deploy.yml with a second llama.cpp pin (the same release with one file added: another build) while
a client asks for short completions back to back, and deploy.yml with the first pin again (the output of each goes to
DEMO_DIR/bench/upgrade-*.log), then site.yml once more. For each: the longest stretch
without an answer (the serving gap), the failed requests, llama-server's starts, whether it compiled, and the build
every node runs after it. It asserts only what it needs to go on (the cluster serves again); the figures are printed
and written as JSON.

    python -m tests.bench.faults DEMO_DIR [--hold 60] [--only "worker frozen" ...] [--no-upgrade]

Run through `make bench-faults`.
"""

import argparse
import json
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import docker

from demo import cluster as demo
from tests.tools import containers, fault_injection, llama_cpp

ROOT = Path(__file__).resolve().parents[2]
WORKER_UNIT = fault_injection.WORKER_UNIT
SERVER_UNIT = "llama-server.service"
UPGRADE_PLAYBOOK = "deploy.yml"  # how a pin is changed on a serving cluster
# What must survive a fault byte for byte (the tensor caches may gain files written whole).
KEPT = {"master": ["/srv/models", "/etc/llama-rpc", "/opt/llama.cpp", "/etc/systemd/system", "/etc/ansible/facts.d",
                   "/usr/local/lib/llama-server-watchdog.py"],
        "worker": ["/var/cache/llama-rpc-worker", "/etc/llama-rpc-worker", "/opt/llama.cpp", "/etc/systemd/system",
                   "/etc/ansible/facts.d"]}
CACHE_ROOT = "/var/cache/llama-rpc-worker/"


class Cluster:
    """The demo's containers, llama-server's URL and key, and site.yml as make demo runs it."""

    def __init__(self, demo_dir):
        self.demo_dir = Path(demo_dir)
        self.client = docker.from_env()
        self.master_name, *self.worker_names = demo.names()
        self.key = (self.demo_dir / "api-key").read_text().strip()
        self.changed_tasks = []

    def container(self, name):
        return self.client.containers.get(name)

    def sh(self, name, command, check=True):
        if check:
            return containers.checked_sh(self.container(name), command)
        return containers.sh(self.container(name), command)[1]

    def address(self, name):
        self.container(name).reload()
        return next(iter(self.container(name).attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]

    def url(self):
        return llama_cpp.container_server_url(self.container(self.master_name))

    def site(self, *extra_vars, playbook="site.yml"):
        """Runs site.yml (or another playbook); returns (changed tasks summed over the hosts, seconds, output); the
        changed tasks are in self.changed_tasks."""
        command = ["ansible-playbook", "-i", "inventories/local", f"playbooks/{playbook}",
                   "-e", f"@{self.demo_dir / 'secret-vars.json'}", "-e", f"rpc_master_infer_results_dir={self.demo_dir / 'results'}"]
        for extra in extra_vars:
            command += ["-e", json.dumps(extra)]
        started = time.monotonic()
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        if run.returncode:
            raise RuntimeError(f"{playbook} failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
        recap = run.stdout[run.stdout.rindex("PLAY RECAP"):]
        blocks = re.findall(r"^(?:TASK|RUNNING HANDLER) \[(.*?)\] \**\n(.*?)(?=^TASK |^PLAY |^RUNNING HANDLER )", run.stdout, re.S | re.M)
        self.changed_tasks = [f"{task}: {host}" for task, body in blocks for host in re.findall(r"^changed: \[([^\]]+)\]", body, re.M)]
        return sum(int(count) for count in re.findall(r"changed=(\d+)", recap)), took, run.stdout

    def files(self):
        """{(host, path): sha256} of everything that must survive a fault."""
        found = {}
        for name in [self.master_name, *self.worker_names]:
            roots = " ".join(KEPT["master" if name == self.master_name else "worker"])
            listing = self.sh(name, f"find {roots} -xdev -type f -print0 2>/dev/null | xargs -0 -r sha256sum", check=False)
            for line in listing.splitlines():
                digest, path = line.split("  ", 1)
                found[(name, path)] = digest
        return found

    def serving(self, timeout=300):
        """Until llama-server answers a completion whole (raises after timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fault_injection.complete(self.url(), self.key, n_predict=4) == "ok":
                return
            time.sleep(1)
        raise RuntimeError(f"llama-server does not serve after {timeout} s")


class Load:
    """Clients asking one request after another until stopped; each request's (start, end, ending) is kept."""

    def __init__(self, url, key, clients=3, n_predict=48, stream=True):
        self.url, self.key, self.n_predict, self.stream = url, key, n_predict, stream
        self.requests, self.stop = [], threading.Event()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _client in range(clients)]

    def client(self):
        while not self.stop.is_set():
            started = time.monotonic()
            ended = fault_injection.complete(self.url, self.key, self.n_predict, self.stream)
            self.requests.append((started, time.monotonic(), ended))
            if ended != "ok":
                time.sleep(0.5)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def served_again(self, after, timeout):
        """The end of the first whole answer to a request made after `after` (None within timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [end for start, end, ended in list(self.requests) if ended == "ok" and start >= after]
            if done:
                return min(done)
            time.sleep(0.5)
        return None

    def longest_gap(self, since, until):
        """The longest stretch in [since, until] with no whole answer ending in it."""
        ends = sorted(end for _start, end, ended in self.requests if ended == "ok" and since <= end <= until)
        marks = [since, *ends, until]
        return max(later - earlier for earlier, later in zip(marks, marks[1:]))


# The faults: each injects, and returns what ends it (None: it ends by itself, as a kill does).
def kill_worker(cluster):
    cluster.sh(cluster.worker_names[-1], f"systemctl kill -s KILL {WORKER_UNIT}")


def on_second_worker(fault):
    """A fault of tests/tools/fault_injection.py, injected on the second worker (given the master's address)."""
    def inject(cluster):
        name = cluster.worker_names[-1]
        return fault(lambda command: cluster.sh(name, command), cluster.address(cluster.master_name))
    return inject


def reboot(cluster, name):
    """docker restart: systemd stops every unit (the stop signal), the host boots again; the fault ends when it has."""
    container = cluster.container(name)
    container.restart(timeout=30)
    containers.wait_until_booted(container)


def reboot_worker(cluster):
    reboot(cluster, cluster.worker_names[-1])


def reboot_master(cluster):
    reboot(cluster, cluster.master_name)


def kill_server(cluster):
    cluster.sh(cluster.master_name, f"systemctl kill -s KILL {SERVER_UNIT}")


# name: (inject, held for --hold seconds before it is ended)
FAULTS = {
    "worker killed": (kill_worker, False),
    "worker frozen": (on_second_worker(fault_injection.freeze), True),
    "path dropping every packet": (on_second_worker(fault_injection.drop_every_packet), True),
    "worker host rebooted": (reboot_worker, False),
    "master host rebooted": (reboot_master, False),
    "llama-server killed": (kill_server, False),
}


def run_fault(cluster, name, hold):
    cluster.serving()
    before = cluster.files()
    addresses = {host: cluster.address(host) for host in [cluster.master_name, *cluster.worker_names]}
    inject, held = FAULTS[name]
    with Load(cluster.url(), cluster.key) as load:
        time.sleep(5)  # the clients are streaming
        fault_at = time.monotonic()
        end = inject(cluster)
        if held:
            try:
                time.sleep(hold)
            finally:
                end()
        ended_at = time.monotonic()
        back_at = load.served_again(ended_at, timeout=600)
    met = [(start, end_time, ended) for start, end_time, ended in load.requests
           if end_time >= fault_at and start < (back_at or ended_at)]
    after = cluster.files()
    changed = sorted(key for key in before if key in after and after[key] != before[key])
    removed = sorted(key for key in before if key not in after)
    added = sorted(key for key in after if key not in before)
    site_changed, site_seconds, _output = cluster.site()
    row = {"fault": name, "held_s": hold if held else 0, "requests_met": len(met),
           "requests_failed": sum(1 for _s, _e, ended in met if ended != "ok"),
           "endings": sorted({ended for _s, _e, ended in met}),
           "longest_wait_s": round(max((end_time - max(start, fault_at) for start, end_time, _e in met), default=0), 1),
           "fault_s": round(ended_at - fault_at, 1),
           "serves_again_after_s": round(back_at - ended_at, 1) if back_at else None,
           "files_changed": len(changed) + len(removed), "changed_or_removed": [list(key) for key in changed + removed][:10],
           "files_added": len(added), "added_outside_caches": [list(key) for key in added if not key[1].startswith(CACHE_ROOT)],
           "addresses_kept": addresses == {host: cluster.address(host) for host in addresses},
           "site_changed": site_changed, "site_changed_tasks": cluster.changed_tasks, "site_s": round(site_seconds)}
    print(json.dumps(row), flush=True)
    return row


def builds(cluster):
    return {name: cluster.sh(name, "readlink -f /opt/llama.cpp/current").rsplit("/", 1)[1]
            for name in [cluster.master_name, *cluster.worker_names]}


def server_starts(cluster, since_epoch):
    journal = cluster.sh(cluster.master_name, f"journalctl -u {SERVER_UNIT} --since @{since_epoch:.0f} --no-pager -o cat")
    return sum(1 for line in journal.splitlines() if line.startswith("Started "))


def run_upgrade(cluster, label, *extra_vars):
    """deploy.yml with extra_vars while one client asks for short completions back to back. deploy.yml, not site.yml:
    site.yml also runs its one-shot inference, which pauses llama-server once more (the workers serve one client)."""
    cluster.serving()
    since_epoch = time.time()
    with Load(cluster.url(), cluster.key, clients=1, n_predict=8, stream=False) as load:
        time.sleep(3)
        started = time.monotonic()
        _changed, took, output = cluster.site(*extra_vars, playbook=UPGRADE_PLAYBOOK)
        log = cluster.demo_dir / "bench" / f"upgrade-{label.replace(' ', '-')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(output)
        ended = time.monotonic()
        back_at = load.served_again(ended, timeout=300)
        gap = load.longest_gap(started, back_at or ended)
    during = [request for request in load.requests if started <= request[1] and request[0] <= (back_at or ended)]
    row = {"upgrade": label, "playbook": UPGRADE_PLAYBOOK, "playbook_s": round(took), "longest_gap_s": round(gap, 1),
           "requests": len(during), "requests_failed": sum(1 for _s, _e, ended_as in during if ended_as != "ok"),
           "server_starts": server_starts(cluster, since_epoch),
           "compiled": "/_compile.yml" in output, "received_build": "/_distribute.yml" in output,
           "builds": builds(cluster)}
    print(json.dumps(row), flush=True)
    return row


def table(rows):
    header = ("fault", "held s", "longest wait s", "failed/met", "back after s", "files changed", "files added",
              "site.yml changed", "addresses kept")
    lines = [" | ".join(header), " | ".join("---" for _h in header)]
    for row in rows:
        added = f"{row['files_added']} (outside caches: {len(row['added_outside_caches'])})"
        lines.append(" | ".join(str(cell) for cell in (
            row["fault"], row["held_s"], row["longest_wait_s"], f"{row['requests_failed']}/{row['requests_met']}",
            row["serves_again_after_s"], row["files_changed"], added, row["site_changed"], row["addresses_kept"])))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("demo_dir")
    parser.add_argument("--hold", type=int, default=60, help="seconds a frozen worker or a dropping path is held")
    parser.add_argument("--only", nargs="*", choices=list(FAULTS), default=list(FAULTS))
    parser.add_argument("--no-upgrade", action="store_true")
    args = parser.parse_args()
    cluster = Cluster(args.demo_dir)
    baseline_changed, baseline_s, _output = cluster.site()
    print(f"site.yml before the faults: changed={baseline_changed} ({baseline_s:.0f} s)", flush=True)
    rows = [run_fault(cluster, name, args.hold) for name in args.only]
    upgrades = []
    if not args.no_upgrade:
        first = builds(cluster)
        with tempfile.TemporaryDirectory() as work_dir:
            archive, sha256 = llama_cpp.patched_archive(Path(work_dir))
        upgrades.append(run_upgrade(cluster, "to another build",
                                    {"llama_build_archive_src": str(archive), "llama_build_archive_sha256": sha256}))
        upgrades.append(run_upgrade(cluster, "back to the first build"))
        final_changed, final_s, _output = cluster.site()
        upgrades.append({"upgrade": "site.yml again", "site_changed": final_changed, "site_s": round(final_s),
                         "builds_as_before": builds(cluster) == first})
        print(json.dumps(upgrades[-1]), flush=True)
    results = cluster.demo_dir / "bench" / f"faults-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"hold_s": args.hold, "faults": rows, "upgrades": upgrades}, indent=1))
    print(f"\nmake bench-faults: each fault under 3 streaming clients ({results})\n")
    print(table(rows))
    for row in upgrades:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
