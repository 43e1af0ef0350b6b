"""The default source a user gets, llama_build_source: git, end to end: the llama_build role checks out a release tag
from a git repository and builds and installs it. A local repository stands in for upstream (no GitHub here): the
pinned llama.cpp tree committed once per machine with fixed names and dates (so its commit is the same every time) and
tagged as the release, reached by the host over file://, a transport the role's git module uses as it uses https.

One target (the RPC worker's), to keep the compile short: this is also the test of a worker-only build
(llama_build_targets: [ggml-rpc-server]), which has the worker program, the role's helpers and nothing else, and takes
the worker's patch (rpc_cache_check) but not the master's. The
build is kept in the machine's build cache like every other: the checkout and the compile run when that cache lacks it
(every fresh machine, every change to the tag, the repository or the role's build identity); a warm run installs the
kept build, as for the archive path."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.tools import containers, llama_cpp

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "playbooks" / "llama_build.yml"
HOST = "llama-rpc-git-source"
REPOSITORY = "/srv/llama.cpp.git"
VERSION = os.environ["LLAMA_RPC_TEST_LLAMA_VERSION"]  # the pinned release (tests/bed/env.sh)
# a fixed author and date: the same tree gives the same commit on every machine
COMMITTER = {"GIT_AUTHOR_NAME": "test bed", "GIT_AUTHOR_EMAIL": "test@bed", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
             "GIT_COMMITTER_NAME": "test bed", "GIT_COMMITTER_EMAIL": "test@bed", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def release_repository():
    """A bare repository with the pinned tree as one commit tagged VERSION, made once under the build cache. Returns
    its path and the tag's commit."""
    bare = llama_cpp.BUILD_CACHE / "git" / f"llama.cpp-{VERSION}.git"
    if not (bare / "refs" / "tags" / VERSION).exists():
        partial = bare.with_name(bare.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        git = ["git", "--git-dir", str(partial), "--work-tree", str(llama_cpp.source_dir())]
        env = dict(os.environ, **COMMITTER)
        subprocess.run(["git", "init", "-q", "--bare", str(partial)], check=True)
        # every file of the release, its own .gitignore notwithstanding (upstream's tag has them all)
        for command in (["add", "-A", "-f"], ["commit", "-q", "-m", f"llama.cpp {VERSION}"], ["tag", VERSION]):
            subprocess.run(git + command, check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(bare)], check=True)
        partial.rename(bare)
    commit = subprocess.run(["git", "--git-dir", str(bare), "rev-parse", f"{VERSION}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    return bare, commit


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The role run once with the git source: (its result, the host, the tag's commit)."""
    bare, commit = release_repository()
    volumes = {str(bare): {"bind": REPOSITORY, "mode": "ro"}}
    with containers.throwaway_host(HOST, HOST, tmp_path_factory.mktemp("inventory"), volumes) as (container, inventory):
        # the build's role variables: no archive at all
        extra = {"llama_build_source": "git", "llama_build_git_repo": f"file://{REPOSITORY}", "llama_build_version": VERSION,
                 "llama_build_targets": ["ggml-rpc-server"], "llama_build_patches": ["rpc_known_hashes", "rpc_cache_check"],
                 "llama_build_controller_cache": str(llama_cpp.BUILD_CACHE / "artifacts")}
        result = containers.run_playbook(inventory, PLAYBOOK, extra, timeout=3600)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        rerun = containers.run_playbook(inventory, PLAYBOOK, extra)
        yield result, rerun, container, commit


def test_the_tag_is_checked_out_built_and_recorded(built):
    _result, _rerun, container, commit = built
    record = json.loads(containers.read_file(container, "/opt/llama.cpp/current/build-record.json"))
    assert record["version"] == VERSION and record["commit"] == commit[:9], record
    assert record["source"]["type"] == "git" and record["source"]["location"] == f"file://{REPOSITORY}", record
    assert record["rpc_protocol"] == "7.0.0", record
    help_text = containers.run(container, ["/opt/llama.cpp/current/bin/ggml-rpc-server", "--help"])[1].decode()
    assert "Usage" in help_text, help_text
    # the published state names the git commit as the build's source (the master's same-build gate compares it)
    fact = json.loads(containers.read_file(container, "/etc/ansible/facts.d/llama_rpc_build.fact"))
    assert fact["identity"]["source"] == f"git file://{REPOSITORY} at {commit[:9]}", fact["identity"]


def test_a_worker_only_build_takes_the_workers_patch_and_ignores_the_masters_saying_so(built):
    """llama_build_patches: [rpc_known_hashes, rpc_cache_check] on a build with no program that loads a model: the
    master's patch (and rpc_lost_worker, which comes with it) is not applied, and the run says so; the worker's (it
    changes ggml-rpc-server only) is."""
    result, _rerun, container, _commit = built
    programs = "changes only the programs that load a model (llama-server, llama-completion, llama-cli, llama-bench)"
    assert "llama_build_patches ignored on %s, whose build has only ggml-rpc-server (llama_build_targets): " \
        "rpc_lost_worker %s; rpc_known_hashes %s." % (HOST, programs, programs) in result.stdout, result.stdout[-3000:]
    record = json.loads(containers.read_file(container, "/opt/llama.cpp/current/build-record.json"))
    assert record.get("patches", []) == ["rpc_cache_check"], record


def test_a_worker_only_build_has_the_worker_program_its_helpers_and_nothing_else(built):
    """What llama_build_targets: [ggml-rpc-server] installs: the worker, the cache tool, the CPU probe (which the role
    ran before installing: every build carries it, the worker-only one too); none of the default programs a master
    runs, and a record that says so."""
    _result, _rerun, container, _commit = built
    listing = containers.checked_sh(container, "ls /opt/llama.cpp/current/bin").split()
    assert sorted(listing) == ["ggml-rpc-server", "llama-cpu-probe", "llama-rpc-cache"], listing
    record = json.loads(containers.read_file(container, "/opt/llama.cpp/current/build-record.json"))
    assert record["targets"] == ["ggml-rpc-server"], record["targets"]
    probe = containers.run(container, ["/opt/llama.cpp/current/bin/llama-cpu-probe"])
    assert probe[0] == 0 and "largest error" in probe[1].decode(), probe


def test_a_rerun_changes_nothing_and_fetches_nothing(built):
    _result, rerun, _container, _commit = built
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert containers.changed_per_host(rerun.stdout) == {HOST: 0}, rerun.stdout[-3000:]
    assert "Check out" not in rerun.stdout, "the installed build's source was fetched again"
