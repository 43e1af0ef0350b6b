#!/usr/bin/env bash
# make demo / make demo-clean: the local llama.cpp cluster. A master and two workers as systemd
# containers on this machine, a small demo model (random weights: it proves the plumbing, its text is
# noise), llama.cpp built from the offline source, site.yml: deploy, one-shot inference, llama-server.
# A re-run reuses the containers, the build and the model. Ansible reaches the containers with docker exec as root
# (inventories/local), for speed: the SSH access path users have on AWS is the cluster scenario's (README).
set -euo pipefail
. "$(dirname "$0")/../tests/bed/lib.sh"
cd "$REPO_ROOT"
bash tests/bed/host.sh
VENV=$(bash tests/bed/venv.sh)
. tests/bed/env.sh

demo_dir="$LLAMA_RPC_CACHE/demo"

# The newest file matching a pattern in a directory (nothing when none).
newest() {
  find "$1" -maxdepth 1 -name "$2" -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -1 | cut -d' ' -f2-
}

demo_up() {
    bash tests/bed/images.sh
    bash tests/bed/sources.sh
    detect_privileged
    mkdir -p "$demo_dir/results"
    python -m demo.cluster up "$demo_dir"
    key_file="$demo_dir/api-key"
    [ -s "$key_file" ] || (umask 077; python -c 'import secrets; print(secrets.token_urlsafe(24))' >"$key_file")
    started=$(date +%s)
    say "make demo reaches its containers with docker exec as root, for speed; the AWS access path (SSH as ubuntu with sudo, the workers through the master) is the cluster scenario's (make test)"
    # The key goes in through a vars file (not the command line, where ps would show it).
    vars_file="$demo_dir/secret-vars.json"
    (umask 077; python -c 'import json,sys; print(json.dumps({"rpc_master_server_api_key": open(sys.argv[1]).read().strip()}))' \
      "$key_file" >"$vars_file")
    ansible-playbook -i inventories/local playbooks/site.yml -e @"$vars_file" -e monitoring_enabled=true \
      -e rpc_master_infer_results_dir="$demo_dir/results" | tee "$demo_dir/site.log"
    took=$(( $(date +%s) - started ))
    # Prometheus on the master (role monitoring): its targets, once each has been scraped
    sleep 20
    targets=$(docker exec llama-demo-master python3 -c 'import json, urllib.request
targets = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets"))["data"]["activeTargets"]
print("%d of %d targets up" % (sum(t["health"] == "up" for t in targets), len(targets)))')
    result=$(newest "$demo_dir/results" 'infer-*.json')
    url=$(docker exec llama-demo-master sh -c '. /etc/llama-rpc/server.env; echo "http://$LLAMA_ARG_HOST:$LLAMA_ARG_PORT"')
    python - "$result" "$url" "$key_file" "$took" "$targets" <<'PY'
import json, sys
result, url, key_file, took, targets = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
figures = result["figures"]
print(f"""
make demo: the local cluster is up ({took} s for site.yml).
  master {result['master']}, workers {', '.join(result['workers'])}, llama.cpp {result['build']['version']}
  model: {result['model'].get('path')} ({result['model'].get('file_size', 0) / 1e6:.1f} MB, random weights: the text is noise)
  generated: {result['text']!r}
  figures: load {figures['load_ms']:.0f} ms, prompt {figures['prompt_tps']:.0f} tokens/s, generation {figures['eval_tps']:.0f} tokens/s
  per worker: {', '.join(f"{k} model {v.get('model', 0) / 1e6:.1f} MB" for k, v in result['buffers'].items() if ':' in k)}
  result file: {sys.argv[1]}
  llama-server: {url} (API key in {key_file})
    curl -s {url}/completion -H "Authorization: Bearer $(cat {key_file})" -d '{{"prompt": "Hello", "n_predict": 16}}'
  Prometheus on the master, 127.0.0.1:9090: {targets}; its console /consoles/llama-rpc.html
    docker exec llama-demo-master python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/alerts").read().decode())'
  Remove it: make demo-clean
""")
PY
}

case "${1:-up}" in
  up) demo_up ;;
  bench)
    # make bench: bench.yml on the local cluster (brought up first when it is not); compared with the previous result.
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    mkdir -p "$demo_dir/bench"
    previous=$(newest "$demo_dir/bench" 'bench-*.json')
    # The secrets file holds llama-server's API key, which the concurrency benchmark sends.
    ansible-playbook -i inventories/local playbooks/bench.yml -e @"$demo_dir/secret-vars.json" -e bench_results_dir="$demo_dir/bench" \
      ${previous:+-e bench_compare_with="$previous"} | tee "$demo_dir/bench.log"
    say "make bench: results in $demo_dir/bench (chart: $(newest "$demo_dir/bench" 'bench-*.png'))"
    ;;
  families)
    # make families: each architecture family's small model deployed with deploy.yml, fully and partly offloaded;
    # the plan against llama.cpp's buffers, the tokens against the master alone (demo/families.py). Then the demo
    # model is deployed again.
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    vars_file="$demo_dir/secret-vars.json"
    restore_demo() { ansible-playbook -i inventories/local playbooks/deploy.yml -e @"$vars_file" >"$demo_dir/families-restore.log"; }
    trap restore_demo EXIT
    PYTHONPATH="$ANSIBLE_COLLECTIONS_PATH${PYTHONPATH:+:$PYTHONPATH}" python -m demo.families "$demo_dir" "$vars_file"
    ;;
  first-load)
    # make bench-first-load: the local cluster deployed with a model whose weights, like a 70B's, are nearly all in
    # tensors over 10 MiB; bench.yml's loads cold, staged and warm; then the demo model is deployed again.
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    mkdir -p "$demo_dir/bench"
    model=$(python -m demo.cluster first-load-model "$demo_dir" | tail -1)
    vars_file="$demo_dir/secret-vars.json"
    restore() { ansible-playbook -i inventories/local playbooks/deploy.yml -e @"$vars_file" >"$demo_dir/first-load-restore.log"; }
    trap restore EXIT
    ansible-playbook -i inventories/local playbooks/deploy.yml -e @"$vars_file" -e rpc_master_model_src="$model" \
      >"$demo_dir/first-load-deploy.log"
    name="first-load-$(date -u +%Y%m%dT%H%M%SZ)"
    ansible-playbook -i inventories/local playbooks/bench.yml -e bench_results_dir="$demo_dir/bench" -e bench_name="$name" \
      -e '{"bench_worker_counts": [2], "bench_single_node": false, "bench_n_prompt": [16], "bench_n_gen": [4], "bench_repetitions": 1,
           "bench_concurrency": []}' \
      | tee "$demo_dir/first-load.log"
    python - "$demo_dir/bench/$name.json" <<'PY'
import json, sys
load = json.load(open(sys.argv[1]))["load"]
summary = load["summary"]
print(f"""
make bench-first-load ({sys.argv[1]}):
  loads (ms): cold {load['cold_ms']:.0f}, staged {load['staged_ms']:.0f}, warm {load['warm_ms']:.0f}
  staged / cold: {summary.get('staged_over_cold')} (goal <= 0.5)
  bytes sent for the staged load: {100 * summary.get('staged_sent_fraction_of_model', 0):.2f}% of the model (goal <= 5%)
  staging: {summary.get('staging_mbit_per_s')} Mbit/s, {100 * summary.get('staging_fraction_of_raw_tcp_summed', 0):.0f}% of raw TCP summed over the workers (goal >= 70%)
  parts (ms): {json.dumps(load['breakdown'])}
""")
PY
    ;;
  tunnel)
    # make bench-tunnel: bench.yml on the local cluster with RPC in the clear and through the WireGuard tunnel (role
    # rpc_tunnel), one after the other in one run; the figures side by side; then the cluster as it was (no tunnel).
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    python -m demo.cluster has-tun || die "the demo containers were made without the TUN device that wireguard-go needs: make demo-clean, then make bench-tunnel"
    mkdir -p "$demo_dir/bench"
    vars_file="$demo_dir/secret-vars.json"
    stamp=$(date -u +%Y%m%dT%H%M%SZ)
    deploy() { ansible-playbook -i inventories/local playbooks/deploy.yml -e @"$vars_file" -e rpc_tunnel_enabled="$1" >"$demo_dir/tunnel-deploy-$1.log"; }
    restore() { deploy false; }
    trap restore EXIT
    for tunnel in false true; do
      say "bench-tunnel: deploy.yml with rpc_tunnel_enabled=$tunnel, then bench.yml"
      deploy "$tunnel"
      ansible-playbook -i inventories/local playbooks/bench.yml -e @"$vars_file" -e bench_results_dir="$demo_dir/bench" \
        -e bench_name="tunnel-$tunnel-$stamp" -e '{"bench_worker_counts": [2], "bench_single_node": false}' \
        ${plain:+-e bench_compare_with="$plain"} | tee "$demo_dir/tunnel-bench-$tunnel.log"
      plain="$demo_dir/bench/tunnel-false-$stamp.json"
    done
    # The same ratios bench.yml prints for bench_compare_with (module_utils llama_cpp/bench_results.compare), once more at the end.
    python - "$plain" "$demo_dir/bench/tunnel-true-$stamp.json" <<'PY'
import json, sys
from tests.tools import collection
collection.importable()
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.bench_results import compare
plain, tunnel = (json.load(open(path)) for path in sys.argv[1:3])
print(f"\nmake bench-tunnel, in the clear -> through the tunnel ({sys.argv[1]} and {sys.argv[2]}):")
print("\n".join("  " + line for line in compare(plain, tunnel)[1].splitlines()))
PY
    ;;
  faults)
    # make bench-faults: every fault of issue 15 under load on the local cluster, then an upgrade and back (figures)
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    export PYTHONPATH="$ANSIBLE_COLLECTIONS_PATH${PYTHONPATH:+:$PYTHONPATH}"
    shift
    python -u -m tests.bench.faults "$demo_dir" "$@" | tee "$demo_dir/faults.log"
    ;;
  stop)
    # make demo-stop: llama-server and the workers' services (playbooks/stop.yml), then the containers. A cluster
    # stopped already says so and changes nothing; one partly running has the rest of its containers stopped.
    case $(python -m demo.cluster state) in
      absent) say "make demo-stop: there is no local cluster (make demo brings one up); nothing changes" ;;
      stopped) say "make demo-stop: the local cluster is stopped already; nothing changes" ;;
      running)
        ansible-playbook -i inventories/local playbooks/stop.yml | tee "$demo_dir/stop.log"
        python -m demo.cluster stop
        say "make demo-stop: the local cluster is stopped with everything in it; make demo-start brings it back" ;;
      *)
        python -m demo.cluster stop
        say "make demo-stop: the local cluster was partly running; its containers are stopped with everything in them" ;;
    esac
    ;;
  start)
    # make demo-start: the containers, then playbooks/start.yml (the services, llama-server's first token timed from
    # before the containers started). A cluster running already: start.yml alone, which says so and changes nothing.
    case $(python -m demo.cluster state) in
      absent) die "make demo-start: there is no local cluster to start: make demo brings one up" ;;
      running) ansible-playbook -i inventories/local playbooks/start.yml | tee "$demo_dir/start.log" ;;
      *)
        began=$(date +%s)
        python -m demo.cluster start
        ansible-playbook -i inventories/local playbooks/start.yml -e start_began="$began" -e start_hosts_started=true \
          | tee "$demo_dir/start.log" ;;
    esac
    ;;
  restart)
    # make bench-restart: the time to serve again after a stop, beside a first deploy's, on the local cluster, one run.
    # A first deploy: the workers' caches emptied and llama-server stopped, then deploy.yml (it stages every hashed
    # tensor, starts llama-server, which loads) and the first token. A start: make demo-stop, the page cache dropped
    # (a stopped instance starts with none; this needs root), then the containers and start.yml, timed to the first token.
    docker inspect llama-demo-master >/dev/null 2>&1 || demo_up
    vars_file="$demo_dir/secret-vars.json"
    drop_caches() { if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 >/proc/sys/vm/drop_caches; echo dropped; else echo "kept (not root)"; fi; }
    python -m demo.cluster empty-worker-caches
    docker exec llama-demo-master systemctl stop llama-server
    dropped_deploy=$(drop_caches)
    began=$(date +%s.%N)
    ansible-playbook -i inventories/local playbooks/deploy.yml -e @"$vars_file" >"$demo_dir/restart-deploy.log"
    deployed=$(python -c "import time; print('%.1f' % (time.time() - $began))")
    token=$(python -m demo.cluster first-token "$demo_dir/api-key" | tail -1)
    ansible-playbook -i inventories/local playbooks/stop.yml >"$demo_dir/restart-stop.log"
    python -m demo.cluster stop
    dropped_start=$(drop_caches)
    began=$(date +%s)
    python -m demo.cluster start
    ansible-playbook -i inventories/local playbooks/start.yml -e start_began="$began" -e start_hosts_started=true \
      | tee "$demo_dir/restart-start.log"
    python - "$deployed" "$token" "$demo_dir/restart-start.log" "$dropped_deploy" "$dropped_start" <<'PY'
import re, sys
deployed, token, log, dropped_deploy, dropped_start = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
start = float(re.search(r"gave its first token ([0-9.]+) s after the start began", open(log).read()).group(1))
print(f"""
make bench-restart (the local cluster, one run; page cache {dropped_deploy} before the deploy, {dropped_start} before the start):
  first deploy to first token: {deployed + token:.1f} s (deploy.yml {deployed:.1f} s with the workers' caches empty, then {token:.1f} s to the token)
  start to first token:        {start:.1f} s (the containers started, then start.yml: nothing built, fetched or staged)
  start / first deploy:        {start / (deployed + token):.2f}
""")
PY
    ;;
  down)
    python -m demo.cluster down
    say "make demo-clean: the demo containers and network are removed (images, build caches and the demo model are kept)"
    ;;
  *) die "usage: demo/demo.sh up|bench|families|first-load|tunnel|faults|stop|start|restart|down" ;;
esac
