"""Build and run llama.cpp on the test machine itself (not through the roles): for the cross-build
proof and for benchmarks that compare our deployment with binaries started by hand.

The source is the pinned archive from tests/bed/env.sh; builds and the compiler cache live under
LLAMA_RPC_BUILD_CACHE, so a re-run compiles nothing that did not change.
"""

import collections
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import yaml
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log

ROOT = Path(__file__).resolve().parents[2]
BUILD_CACHE = Path(os.environ.get("LLAMA_RPC_BUILD_CACHE", Path.home() / ".cache" / "graviton-llama-rpc" / "build"))
TOOLCHAINS = Path(__file__).resolve().parent / "toolchains"
# The llama_build role's CPU probe, which the Arm proof links with its cross-built ggml as the role does
CPU_PROBE_SOURCE = ROOT / "roles" / "llama_build" / "files" / "llama-cpu-probe.c"


def fnv1a64(data, value=0xCBF29CE484222325):
    """llama.cpp's hash of a tensor's bytes, which names its file in a worker's cache (ggml-rpc.cpp fnv_hash), in
    Python: slow (seconds per 10 MB), to check the collection's C helper and cache guard against."""
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % value


def fixed_cmake_args():
    """The CMake arguments the llama_build role always uses (one place: the role's vars)."""
    role_vars = yaml.safe_load((ROOT / "roles" / "llama_build" / "vars" / "main.yml").read_text())
    return list(role_vars["_llama_build_fixed_cmake_args"])


# llama.cpp's RPC HELLO (ggml-rpc.cpp: command 14, a 24-byte request); the answer's first 3 bytes are the protocol version
RPC_HELLO = struct.pack("<BQ", 14, 24) + bytes(24)


def protocol_version():
    """The RPC protocol version of the pinned source (ggml-rpc.h), as rpc_probe reports it: "major.minor.patch"."""
    header = (source_dir() / "ggml" / "include" / "ggml-rpc.h").read_text()
    return ".".join(re.search(rf"RPC_PROTO_{part}_VERSION\s+(\d+)", header).group(1) for part in ("MAJOR", "MINOR", "PATCH"))


def pinned_source_file(member):
    """One file of the pinned llama.cpp source, read from the test archive (the test bed downloads it before any test
    runs); the unit tests compare the collection's tables with it without unpacking the whole tree."""
    archive = os.environ.get("LLAMA_RPC_TEST_ARCHIVE", "")
    if not (archive and os.path.exists(archive)):
        # here only: the benchmarks import this module without pytest
        import pytest  # pylint: disable=import-outside-toplevel
        pytest.fail("the pinned llama.cpp source (LLAMA_RPC_TEST_ARCHIVE) is not there: run through make test or make units")
    with tarfile.open(archive) as tar:
        return tar.extractfile(f"{os.environ.get('LLAMA_RPC_TEST_ARCHIVE_SUBDIR', '')}/{member}").read().decode()


def source_dir():
    """The llama.cpp tree of the pinned test archive, unpacked once into the build cache."""
    archive = Path(os.environ["LLAMA_RPC_TEST_ARCHIVE"])
    subdir = os.environ["LLAMA_RPC_TEST_ARCHIVE_SUBDIR"].rstrip("/")
    dest = BUILD_CACHE / "src" / os.environ["LLAMA_RPC_TEST_ARCHIVE_SHA256"][:12]
    tree = dest / subdir
    if not (tree / "CMakeLists.txt").exists():
        partial = dest.with_name(dest.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        partial.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name == subdir or m.name.startswith(subdir + "/")]
            tar.extractall(partial, members=members, filter="data")
        subprocess.run(["rm", "-rf", str(dest)], check=True)
        partial.rename(dest)
    return tree


def _ccache_dir(toolchain):
    """The compiler cache of builds made on this machine (native or per cross toolchain). Sharing the
    containers' cache was tried and got no hits (measured: 0 of 100), so native builds keep their own."""
    return BUILD_CACHE / f"ccache-host-{Path(toolchain).stem if toolchain else 'native'}"


def _stable_copy(toolchain):
    """The toolchain file, copied into the build cache: CMake records its path in a build directory that outlives
    any one checkout, and a later configure there fails once that checkout is gone."""
    copy = BUILD_CACHE / "toolchains" / toolchain.name
    if not copy.exists() or copy.read_bytes() != toolchain.read_bytes():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(toolchain.read_bytes())
    return copy


def build(name, cpu_cmake_args, targets, toolchain=None):
    """Configure and build llama.cpp into BUILD_CACHE/host-builds/NAME; return its bin directory."""
    build_dir = BUILD_CACHE / "host-builds" / name
    # the same ccache settings as the llama_build role's build script
    env = dict(os.environ, CCACHE_DIR=str(_ccache_dir(toolchain)), CCACHE_BASEDIR=str(BUILD_CACHE),
               CCACHE_MAXSIZE="5G", CCACHE_COMPILERCHECK="content")
    version = os.environ["LLAMA_RPC_TEST_LLAMA_VERSION"]
    args = fixed_cmake_args() + [f"-DLLAMA_BUILD_NUMBER={version[1:]}",
                                 f"-DLLAMA_BUILD_COMMIT={os.environ['LLAMA_RPC_TEST_ARCHIVE_COMMIT']}"] + list(cpu_cmake_args)
    if toolchain:
        toolchain_file = _stable_copy(TOOLCHAINS / toolchain)
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file}")
        # CMake reads the toolchain once, when the directory is first configured: one configured with another
        # file (an older checkout's path) is configured afresh.
        systems = list(build_dir.glob("CMakeFiles/*/CMakeSystem.cmake"))
        if systems and not all(f'include("{toolchain_file}")' in system.read_text() for system in systems):
            subprocess.run(["rm", "-rf", str(build_dir)], check=True)
    log = build_dir.with_suffix(".log")
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        for command in (["cmake", "-S", str(source_dir()), "-B", str(build_dir)] + args,
                        ["cmake", "--build", str(build_dir), "--parallel", str(os.cpu_count()), "--target"] + list(targets)):
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode:
                raise RuntimeError(f"building {name} failed, see {log}:\n" + "".join(log.read_text().splitlines(True)[-25:]))
    return build_dir / "bin"


def cpu_probe(build_bin, compiler):
    """The llama_build role's CPU probe (roles/llama_build/files/llama-cpu-probe.c) linked, as the role links it, with
    the ggml libraries of a build() that built ggml-rpc-server: a program that prints the build's system_info line and
    checks one matrix product, so an Arm build's flags are proven without compiling libllama. Returns its path, in the
    build's bin directory."""
    libraries = build_bin.parent / "ggml" / "src"
    probe = build_bin / "llama-cpu-probe"
    subprocess.run([compiler, "-O2", "-x", "c", str(CPU_PROBE_SOURCE), "-x", "none",
                    f"-I{source_dir() / 'ggml' / 'include'}", "-o", str(probe)]
                   + [str(libraries / f"libggml{part}.a") for part in ("", "-cpu", "-base")] + ["-fopenmp", "-lpthread", "-lm"],
                   check=True, capture_output=True, text=True)
    return probe


def role_build(work_dir, patches=()):
    """llama.cpp for this machine (x86_64), built by the llama_build role itself the way the scenarios build it: in a
    Debian 12 container with their compiler cache (ccache-bookworm), and kept in the controller's cache of built
    binaries that make demo uses too (artifacts). So one compile serves the host-side tests, the scenarios' Debian 12
    hosts (which then hit the compiler cache) and the demo, and a later run unpacks the kept build without compiling.
    Returns the bin directory of the build, unpacked on this machine. patches: llama_build_patches (a build of its own,
    compiled in the same container and compiler cache, so only what the patches change compiles again)."""
    from tests.tools import containers  # docker, only here: the benchmarks import this module without it

    artifacts = BUILD_CACHE / "artifacts"
    compiler_cache = {str(BUILD_CACHE / "ccache-bookworm"): {"bind": "/var/cache/llama.cpp/ccache", "mode": "rw"}}
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    # make test's two pytest processes both ask for it: one container of that name, one compile. The second waits here
    # and then finds the kept build (without the lock, its container replaced the first one's mid-compile, on a
    # fresh machine: the first build was killed).
    # Once per make test (tests/run.sh names the file): the second process takes the first one's build, which the role
    # on a fresh host has just proved, instead of running the role again on another one to unpack the same build.
    done = os.environ.get("LLAMA_RPC_ROLE_BUILD_DONE")
    with open(BUILD_CACHE / "role-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if patches:
            return _role_build_locked(work_dir, containers, artifacts, compiler_cache, list(patches))
        kept = Path(Path(done).read_text()) if done and os.path.isfile(done) else None
        if kept and kept.is_dir():
            return kept
        bin_dir = _role_build_locked(work_dir, containers, artifacts, compiler_cache)
        if done:
            Path(done).write_text(str(bin_dir))
        return bin_dir


def _role_build_locked(work_dir, containers, artifacts, compiler_cache, patches=()):
    with containers.throwaway_host("llama-rpc-role-build", "llama-rpc-role-build", work_dir, compiler_cache) as (host, hosts):
        result = containers.run_playbook(hosts, ROOT / "tests" / "playbooks" / "llama_build.yml",
                                         dict(containers.archive_source_vars(), llama_build_controller_cache=str(artifacts),
                                              llama_build_patches=list(patches)),
                                         timeout=3600)
        if result.returncode:
            raise RuntimeError(f"the llama_build role failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
        # the role's published state (local fact llama_rpc_build) names the build
        build_id = json.loads(containers.read_file(host, "/etc/ansible/facts.d/llama_rpc_build.fact"))["id"]
    unpacked = BUILD_CACHE / "role-builds" / build_id
    if not (unpacked / "bin").is_dir():
        partial = unpacked.with_name(build_id + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        partial.mkdir(parents=True)
        with tarfile.open(artifacts / f"{build_id}.tar.gz") as tar:  # <build id>/{bin,build-record.json}
            tar.extractall(partial, filter="data")
        (partial / build_id).rename(unpacked)
        partial.rmdir()
    return unpacked / "bin"


# One parser for llama.cpp's log: the collection's (tests run with the checkout importable as the collection).
system_info = llama_log.system_info
perf = llama_log.perf
complete = llama_log.complete


# llama-server's settings on a master, the environment file its unit reads (rpc_master's server.env.j2).
SERVER_ENV = "/etc/llama-rpc/server.env"


def server_url(env_text):
    """llama-server's URL, from the text of SERVER_ENV."""
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line and not line.startswith("#"))
    return f"http://{env['LLAMA_ARG_HOST']}:{env['LLAMA_ARG_PORT']}"


# Runs on a master (python3 -c, argv URL KEY [BODY]): a request to llama-server there, POST of the JSON BODY when given,
# GET otherwise; prints the status, a newline, then the body (status 0 and the error when nothing answered).
REQUEST_ON_MASTER = """
import sys, urllib.request, urllib.error
url, key, body = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
request = urllib.request.Request(url, data=body.encode() if body else None,
                                 headers={"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key else {})})
try:
    with urllib.request.urlopen(request, timeout=120) as reply:
        print(reply.status)
        print(reply.read().decode("utf-8", "replace"))
except urllib.error.HTTPError as error:
    print(error.code)
    print(error.read().decode("utf-8", "replace"))
except Exception as error:  # refused, reset, timed out: the caller retries or reports it
    print(0)
    print(repr(error))
"""


def request_on_master(url, key="", body=None):
    """The command (an argv list) that sends one request from a master to llama-server: REQUEST_ON_MASTER."""
    return ["python3", "-c", REQUEST_ON_MASTER, url, key] + ([json.dumps(body)] if body is not None else [])


def answer(output):
    """(status, body) from REQUEST_ON_MASTER's output."""
    status, _sep, body = output.partition("\n")
    return int(status), body.rstrip("\n")


def container_server_url(container):
    """llama-server's URL on a master that is a docker container, from its SERVER_ENV."""
    from tests.tools import containers  # docker, only here: the benchmarks import this module without it

    return server_url(containers.checked_sh(container, f"cat {SERVER_ENV}"))


def greedy_command(bin_dir, model, prompt, tokens, options=""):
    """The shell command for llama-completion, greedy (--temp 0), one prompt, no chat template, no fitting: what the
    tests compare a cluster's tokens with."""
    return (f"GGML_NO_BACKTRACE=1 {bin_dir}/llama-completion -m {model} {options} -p '{prompt}' -n {tokens} "
            "--temp 0 -no-cnv -fit off")


def until_complete(run, attempts=6):
    """Runs a llama-completion once more while it exits 0 without its closing timing lines: it loses its last output
    lines in about 5% of runs (once three in a row here), an unflushed logger. run() runs it once, wherever it runs,
    and returns (exit code, log, result); returns the last run's result."""
    for attempt in range(attempts):
        code, log, result = run()
        if code != 0 or complete(log):
            return result
        print(f"attempt {attempt + 1}: llama-completion lost its last output lines, running it again")
    return result


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port, process, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the process listening on {port} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_for_health(port, process, timeout=300):
    """Until the llama-server process on 127.0.0.1:port answers /health with 200 (True: its models are loaded) or exits
    (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:  # not listening yet, or 503 while it loads
            pass
        time.sleep(0.2)
    raise TimeoutError(f"llama-server on 127.0.0.1:{port} neither loaded nor exited in {timeout}s")


@contextlib.contextmanager
def llama_server(bin_dir, model, log_path, *options, timeout=300):
    """llama-server with model on 127.0.0.1, its log in log_path: yields its port once it has loaded (or fails with the
    log's end), stopped on exit. SIGPIPE ignored, as systemd runs it (IgnoreSIGPIPE=yes): a write to a lost worker
    fails, and llama.cpp says so, instead of killing it without a word."""
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port",
                                    str(port), "-c", "512", "-np", "1", *options], stdout=log, stderr=subprocess.STDOUT,
                                   restore_signals=False)
    try:
        assert wait_for_health(port, process, timeout), open(log_path).read()[-2000:]
        yield port
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)


def rpc_commands(log_text):
    """How many times a worker served each RPC command (its GGML_RPC_DEBUG lines start with [command])."""
    return dict(collections.Counter(re.findall(r"^\[([a-z_]+)\]", log_text, re.M)))


class LoopbackWorkers(list):
    """The endpoints (host:port) of loopback_workers' workers, in order; pids: each one's process id by endpoint."""

    def __init__(self):
        super().__init__()
        self.pids = {}


@contextlib.contextmanager
def loopback_workers(bin_dir, count, threads=None, debug_dir=None):
    """count ggml-rpc-server workers of bin_dir on 127.0.0.1 (threads each; None: llama.cpp's choice), each listening
    before this yields their endpoints (host:port; a LoopbackWorkers, which also has their pids), stopped on exit.
    SIGPIPE stays ignored (restore_signals=False), as systemd runs a worker: a client that gave up is answered later on a
    closed socket, which would kill a worker started from a shell. With debug_dir, each logs every command it serves
    (GGML_RPC_DEBUG) to debug_dir/<port>.log."""
    processes, endpoints = [], LoopbackWorkers()
    try:
        for _index in range(count):
            port = free_port()
            argv = [str(Path(bin_dir) / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)]
            log = open(Path(debug_dir) / ("%d.log" % port), "w") if debug_dir else subprocess.DEVNULL
            process = subprocess.Popen(argv + (["-t", str(threads)] if threads else []), stdout=subprocess.DEVNULL,
                                       stderr=log, restore_signals=False,
                                       env=dict(os.environ, GGML_RPC_DEBUG="1") if debug_dir else None)
            processes.append(process)
            wait_for_port(port, process)
            endpoints.append(f"127.0.0.1:{port}")
            endpoints.pids[endpoints[-1]] = process.pid
        yield endpoints
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def run_here(argv, environ_update=None):
    """AnsibleModule.run_command's contract on this machine (argv, environ_update -> rc, stdout, stderr), for the
    collection's module_utils that take one."""
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, **(environ_update or {})), check=False)
    return done.returncode, done.stdout, done.stderr


def patched_archive(work_dir):
    """The test archive with one file added (LOCAL-PATCH in the llama.cpp tree): the same release and commit, other
    content. Written the same way every time (fixed times and owners), so its sha256 is the same in every run, and kept
    beside the test archive: its build is compiled once on a machine and comes from the controller's cache after."""
    archive = Path(os.environ["LLAMA_RPC_TEST_ARCHIVE"])
    patched = archive.with_name(archive.name.replace(".tar.gz", "-local-patch.tar.gz"))
    if not patched.exists():
        unpacked = work_dir / "patched.tar"
        with gzip.open(archive) as source, open(unpacked, "wb") as plain:
            shutil.copyfileobj(source, plain)
        content = b"a local change\n"
        member = tarfile.TarInfo(f"{os.environ['LLAMA_RPC_TEST_ARCHIVE_SUBDIR']}/LOCAL-PATCH")
        member.size, member.mtime, member.mode = len(content), 0, 0o644
        with tarfile.open(unpacked, "a") as tar:
            tar.addfile(member, io.BytesIO(content))
        partial = patched.with_name(patched.name + ".partial")
        with open(unpacked, "rb") as plain, gzip.GzipFile(partial, "wb", compresslevel=1, mtime=0) as packed:
            shutil.copyfileobj(plain, packed)
        partial.rename(patched)
    return patched, hashlib.sha256(patched.read_bytes()).hexdigest()
