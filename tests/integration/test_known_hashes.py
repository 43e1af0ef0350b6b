"""The master's known-hashes build (llama_build_patches: [rpc_known_hashes], roles/llama_build/files/patches/) beside
stock, on this machine's loopback: both built by the llama_build role (tests/tools/llama_cpp.role_build; the patched one
compiles only what the patch changes), two stock ggml-rpc-server -c workers, the record of the tensor hashes written by
the collection's own module (gguf_tensor_hashes), a model whose feed-forward tensors travel by hash.

Every load's greedy tokens are the master alone's: cold (the record's hashes, the caches empty: the files stock writes),
warm with every page cache dropped (the master reads only what it keeps itself: its own share and the small tensors),
mixed (some cache files removed), with a stale record (the model replaced by hand by another of the same size under the
same name, also with its modification time put back or removed and copied back with its times, the record written
after: the record is refused, the new model's tokens come out), and with a record cut short or edited. A worker
killed in the middle of a load is named, and the cache guard leaves no short file behind. A load that fails stops
sending."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import pytest

from tests.bench.load import Worker
from tests.tools import llama_cpp, tiny_model
from tests.tools.page_cache import drop, resident

ROOT = Path(__file__).resolve().parents[2]
GUARD = ROOT / "roles" / "rpc_worker" / "files" / "llama-rpc-worker-cache-guard.py"
SHAPE = dict(embd=1024, layers=4, ff=4096, heads=16, kv_heads=16)  # feed-forward tensors of 16 MiB
PROMPT, TOKENS = "The cluster", 12


@pytest.fixture(scope="module")
def builds(x86_build, tmp_path_factory):
    """(stock bin dir, known-hashes and cache-check bin dir)."""
    # the worker's patch too (its rpc-server checks each cache file it uses): one patched build for both sides
    return x86_build, llama_cpp.role_build(tmp_path_factory.mktemp("known-hashes-build"),
                                           patches=["rpc_known_hashes", "rpc_cache_check"])


def write_record(bin_dir, model_path):
    """The collection's record of the model's tensor hashes, by its own module (as rpc_master's deploy writes it)."""
    record = model_path.parent / f".{model_path.name}.tensors.json"
    args = json.dumps({"path": str(model_path), "tool": str(bin_dir / "llama-rpc-cache"), "manifest": str(record)})
    done = subprocess.run(["ansible", "localhost", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                           "-m", "graviton.llama_rpc.gguf_tensor_hashes", "-a", args],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return record, json.loads(record.read_text())


def new_model(path, **shape):
    path.parent.mkdir(parents=True, exist_ok=True)
    return tiny_model.write_model(path, **shape)


def greedy(bin_dir, model_path, workers=(), record=None):
    """(text, log) of a greedy run, every layer on the workers when given; the record named when given."""
    options = (f"--rpc {','.join(f'127.0.0.1:{worker.port}' for worker in workers)} -ngl 999 " if workers else "")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    env.pop("GGML_RPC_HASH_RECORD", None)
    if record:
        env["GGML_RPC_HASH_RECORD"] = str(record)

    def run():
        done = subprocess.run(llama_cpp.greedy_command(bin_dir, model_path, PROMPT, TOKENS, options + "-t 1 -lv 4"),
                              shell=True, capture_output=True, text=True, env=env, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.returncode, done.stderr, (done.stdout, done.stderr)
    return llama_cpp.until_complete(run)


def caches(workers):
    return {worker.port: sorted(path.name for path in worker.cache.iterdir()) for worker in workers}


def dropped(model_path, workers):
    drop(model_path)
    for worker in workers:
        for path in worker.cache.iterdir():
            drop(path)


def test_the_known_hashes_master_loads_as_stock_does_and_reads_only_its_own_share(builds, tmp_path):
    stock, patched = builds
    model_path = new_model(tmp_path / "model" / "model.gguf", **SHAPE)
    record, kept = write_record(stock, model_path)
    hashed = sum(tensor["size"] for tensor in kept["tensors"])
    size = model_path.stat().st_size
    alone, _log = greedy(stock, model_path)
    # a load with no tensor on an RPC device (a draft on the master's CPU) has no use for the record: never read
    patched_alone, patched_alone_log = greedy(patched, model_path, (), record)
    assert patched_alone == alone and "the record" not in patched_alone_log and "tensor hashes from the record" \
        not in patched_alone_log, patched_alone_log[-3000:]

    with Worker(stock, tmp_path / "s1") as first, Worker(stock, tmp_path / "s2") as second:
        stock_text, _log = greedy(stock, model_path, (first, second))
        stock_files = caches((first, second))
        for worker in (first, second):
            worker.wait_for_memory_back()
        dropped(model_path, (first, second))
        greedy(stock, model_path, (first, second))
        stock_read = resident(model_path)

    with Worker(stock, tmp_path / "k1") as first, Worker(stock, tmp_path / "k2") as second:
        workers = (first, second)
        cold_text, cold_log = greedy(patched, model_path, workers, record)
        assert f"{len(kept['tensors'])} tensor hashes from the record" in cold_log, cold_log[-3000:]
        assert list(caches(workers).values()) == list(stock_files.values()), \
            "the known-hashes master's cold load stored other files than stock's (or on another worker)"
        saved = first.saved() + second.saved()
        assert saved == len(kept["tensors"])

        # warm, every page cache dropped: the workers answer every hash from their caches, and the master reads only
        # what it keeps itself (a tensor a worker holds is never read)
        for worker in workers:
            worker.wait_for_memory_back()
        dropped(model_path, workers)
        warm_text, warm_log = greedy(patched, model_path, workers, record)
        warm_read = resident(model_path)
        assert first.saved() + second.saved() == saved, "a warm load stored tensors again"
        print(f"master's reads of the {size} B model, page caches dropped: stock {stock_read} B, known hashes "
              f"{warm_read} B (its own share and the small tensors: {size - hashed} B)")
        assert warm_read <= size - hashed + (4 << 20), (warm_read, size, hashed)
        assert stock_read >= 0.95 * size, "stock read less than the whole file: the comparison shows nothing"

        # mixed: the files removed from one worker are sent and stored again, and only they
        removed = sorted(first.cache.iterdir())[::2]
        for path in removed:
            path.unlink()
        mixed_text, _log = greedy(patched, model_path, workers, record)
        assert first.saved() + second.saved() == saved + len(removed)

        # a record cut short, then one edited by hand (two hashes swapped): not used, said why, the load is stock's
        original = record.read_text()
        record.write_text(original[: len(original) // 2])
        cut_text, cut_log = greedy(patched, model_path, workers, record)
        assert "is not used: it is not the collection's record" in cut_log, cut_log[-3000:]
        edited = json.loads(original)
        edited["tensors"][0]["hash"], edited["tensors"][1]["hash"] = edited["tensors"][1]["hash"], edited["tensors"][0]["hash"]
        record.write_text(json.dumps(edited))
        edited_text, edited_log = greedy(patched, model_path, workers, record)
        assert "is not used: its digest does not match its tensors" in edited_log, edited_log[-3000:]
        record.write_text(original)

        # rewritten while the record was being written: the part's bytes replaced in place with its modification time
        # put back, then the record (whose identity was taken before) written: size, time and inode are the record's,
        # and the record is newer than the part; only the part's status change time tells
        other = new_model(tmp_path / "other" / "model.gguf", seed=7, **SHAPE)
        assert other.stat().st_size == size
        described = model_path.stat()
        time.sleep(0.02)  # the change time ticks coarsely
        with open(other, "rb") as source, open(model_path, "r+b") as target:
            target.write(source.read())
        os.utime(model_path, ns=(described.st_atime_ns, described.st_mtime_ns))
        record.write_text(original)
        rewritten_text, rewritten_log = greedy(patched, model_path, workers, record)
        assert "is not used: it does not describe part 1 of the model" in rewritten_log, rewritten_log[-3000:]

        # removed and copied back with its times (cp -p), the record written after: the same on every count but the
        # status change time (and the inode, unless the file system gives the number again)
        model_path.unlink()
        subprocess.run(["cp", "-p", str(other), str(model_path)], check=True)
        os.utime(model_path, ns=(described.st_atime_ns, described.st_mtime_ns))
        record.write_text(original)
        copied_text, copied_log = greedy(patched, model_path, workers, record)
        assert "is not used: it does not describe part 1 of the model" in copied_log, copied_log[-3000:]

        # stale: the model replaced by hand by another of the same size under the same name (the same inode): the
        # record describes the file no more; the new model's tokens come out
        with open(other, "rb") as source, open(model_path, "r+b") as target:
            target.write(source.read())
        stale_text, stale_log = greedy(patched, model_path, workers, record)
        assert "is not used: it does not describe part 1 of the model" in stale_log, stale_log[-3000:]
        other_alone, _log = greedy(stock, other)

    for name, text in (("stock through the workers", stock_text), ("cold", cold_text), ("warm", warm_text),
                       ("mixed", mixed_text), ("a record cut short", cut_text), ("an edited record", edited_text)):
        assert text == alone, f"{name}: {text!r} is not the master alone's {alone!r}"
    for name, text in (("a part rewritten with its time put back", rewritten_text), ("a part copied back", copied_text),
                       ("stale", stale_text)):
        assert text == other_alone != alone, (name, text, other_alone, alone)


def test_a_cache_file_cut_short_or_replaced_never_fills_a_tensor_of_a_checking_worker(builds, tmp_path):
    """A worker whose cache holds one file cut short (a disk that filled) and one replaced by another model's tensor of
    the same size, with no guard between (a restart of llama-server alone): rpc_cache_check's worker takes neither, and
    the stock master's load gives the master alone's tokens; a stock worker fills the tensors with them."""
    stock, patched = builds
    model_path = new_model(tmp_path / "model" / "model.gguf", **SHAPE)
    other = new_model(tmp_path / "other" / "model.gguf", seed=7, **SHAPE)
    _record, kept = write_record(stock, model_path)
    alone, _log = greedy(stock, model_path)
    found = {}
    for name, bin_dir in (("checking", patched), ("stock", stock)):
        with Worker(bin_dir, tmp_path / name) as worker:
            greedy(stock, model_path, (worker,))
            short, replaced = (worker.cache / tensor["hash"] for tensor in kept["tensors"][:2])
            os.truncate(short, kept["tensors"][0]["size"] // 2)
            with open(other, "rb") as source:
                source.seek(kept["tensors"][1]["offset"])
                replaced.write_bytes(source.read(kept["tensors"][1]["size"]))
            worker.wait_for_memory_back()
            saved = worker.saved()
            text, _log = greedy(stock, model_path, (worker,))
            found[name] = (text, worker.log.read_text(errors="replace"), worker.saved() - saved)
            if name == "checking":
                assert short.stat().st_size == kept["tensors"][0]["size"], "the tensor's bytes were not saved again"
                with open(model_path, "rb") as source:
                    source.seek(kept["tensors"][1]["offset"])
                    assert replaced.read_bytes() == source.read(kept["tensors"][1]["size"]), "the replaced file stayed"
    text, log, saved_again = found["checking"]
    assert text == alone, (text, alone)
    assert log.count("does not hash to its name: not used") == 2 and saved_again == 2, log[-3000:]
    text, log, saved_again = found["stock"]
    assert "does not hash" not in log and saved_again == 0 and text != alone, \
        "a stock worker used the damaged files as they were: the comparison shows what the check does"


def test_a_worker_killed_mid_load_is_named_and_leaves_no_short_cache_file(builds, tmp_path):
    """kill -9 of a worker while it receives a cold load: the master stops with an error that names the worker's
    endpoint (never a hang, never tokens), and the cache guard's check before a worker starts (GUARD_ONCE, as the
    worker's unit runs it) leaves only files whose bytes hash to their name."""
    stock, patched = builds
    model_path = new_model(tmp_path / "model" / "model.gguf", **{**SHAPE, "layers": 12})
    record, _kept = write_record(stock, model_path)
    with Worker(stock, tmp_path / "w1") as first, Worker(stock, tmp_path / "w2") as second:
        env = dict(os.environ, GGML_NO_BACKTRACE="1", GGML_RPC_HASH_RECORD=str(record))
        command = llama_cpp.greedy_command(patched, model_path, PROMPT, TOKENS,
                                           f"--rpc 127.0.0.1:{first.port},127.0.0.1:{second.port} -ngl 999 -t 1")
        load = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while first.saved() < 1 and time.monotonic() < deadline and load.poll() is None:
            time.sleep(0.02)
        assert first.saved() >= 1, "the load ended before the worker stored a tensor: no kill mid-load"
        first.process.send_signal(signal.SIGKILL)
        out, err = load.communicate(timeout=120)
        assert load.returncode != 0, "a load whose worker was killed produced tokens"
        assert f"127.0.0.1:{first.port}" in err and ("crashed" in err or "failed" in err), (load.returncode, err[-3000:])
        assert PROMPT not in out or len(out.strip()) <= len(PROMPT) + 1
        first.process.wait()

    # the worker's unit runs the guard once before the worker listens again
    checked = subprocess.run([sys.executable, str(GUARD)], capture_output=True, text=True, timeout=300, check=False,
                             env=dict(os.environ, GUARD_ONCE="1", CACHE_DIR=str(first.cache),
                                      CACHE_TOOL=str(stock / "llama-rpc-cache"), STATE_FILE=str(tmp_path / "guard.json")))
    assert checked.returncode == 0, checked.stderr[-2000:]
    print(checked.stdout.strip().splitlines()[-1])
    left = sorted(path for path in first.cache.iterdir())
    for path in left:
        digest = subprocess.run([str(stock / "llama-rpc-cache"), "hash", str(path)], capture_output=True, text=True,
                                check=True).stdout.split()[0]
        assert digest == path.name, f"{path.name} is in the cache with other bytes: a load would trust it"


class SlowLink:
    """A TCP relay on loopback to one port that passes the master's bytes at `rate` bytes per second (a slow link) and
    counts them: what a worker received, whether or not it kept it."""

    def __init__(self, port, rate):
        self.port, self.rate, self.forwarded = port, rate, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = "127.0.0.1:%d" % self.listener.getsockname()[1]

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.listener.close()

    def _accept(self):
        while True:
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source, sink, paced):
        started = time.monotonic()
        try:
            for chunk in iter(lambda: source.recv(1 << 16), b""):
                sink.sendall(chunk)
                if paced:
                    self.forwarded += len(chunk)
                    time.sleep(max(0.0, started + self.forwarded / self.rate - time.monotonic()))
        except OSError:
            pass
        for end in (source, sink):  # shut down, not only closed: the other direction's thread still reads it
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()


def test_a_load_that_fails_stops_sending_the_rest_of_the_model(builds, tmp_path):
    """--check-tensors finds a NaN in the model's last weight after the loader has handed every weight to its lane: the
    load fails with its error (the lanes ended before the model's buffers were freed: they wrote to freed memory, a
    crash, before), the lanes drop what they have not begun (the log counts it), and the worker receives a small part
    of its share, where a lane that went on would send all of it over the slow link."""
    _stock, patched = builds
    model_path = new_model(tmp_path / "model" / "model.gguf", **SHAPE)
    last = gguf.GGUFReader(model_path).tensors[-1]
    with open(model_path, "r+b") as model:
        model.seek(last.data_offset)
        model.write(b"\x00\x00\xc0\x7f")  # a float32 NaN as its first value
    share = model_path.stat().st_size  # every layer on the one worker: nearly all of the file
    with Worker(patched, tmp_path / "w") as worker, SlowLink(worker.port, 40 << 20) as link:
        started = time.monotonic()
        done = subprocess.run(llama_cpp.greedy_command(patched, model_path, PROMPT, TOKENS,
                                                       f"--rpc {link.endpoint} -ngl 999 -t 1 -lv 4 --check-tensors"),
                              shell=True, capture_output=True, text=True, timeout=300, check=False)
        seconds = time.monotonic() - started
    print("a failed load sent %d of its %d bytes over the slow link and ended in %.1f s (the whole share: %.1f s)"
          % (link.forwarded, share, seconds, share / (40 << 20)))
    # an error, not a crash: the lanes end before the model's buffers they write to are freed
    assert done.returncode == 1 and "invalid data" in done.stderr, (done.returncode, done.stderr[-3000:])
    assert "the load stopped:" in done.stderr and "weights left unsent" in done.stderr, done.stderr[-3000:]
    assert link.forwarded < share / 3, (link.forwarded, share)
