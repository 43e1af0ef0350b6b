"""Speculative decoding's refusals on a cluster that speculates (cluster_b: draft-simple with a draft of its own model,
molecule.yml): an update to a draft of another vocabulary (llama-server would drop it and serve without speculation),
to a draft URL that fails, and to draft-mtp on a model with no prediction layers are each refused before any change,
named, with llama-server, its settings and the served files as they were, the refused draft not placed, and no hold
on the idle stop left behind. (The text with and
without speculation: test_monitoring.py; a draft lost from disk:
tests/integration/test_rpc_master_alone.py.)

What a test reads or does on a host goes through docker."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import containers, tiny_model  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
CLUSTER = "cluster_b"
[MASTER] = RUNNER.get_hosts("cluster_b_master")
SETTINGS = RUNNER.get_variables(MASTER)
DRAFT_HOST = SETTINGS["rpc_master_spec_draft_src"].rsplit("/", 1)[0]  # the scenario's model host, as the master sees it
DRAFTS = "/var/lib/llama-models/drafts"  # rpc_master_models_dir/drafts: the drafts fetched as releases
HOLD = "/run/llama-rpc-deploy.hold"  # a deploy's hold on the idle stop (roles/rpc_master/tasks/plan.yml)


@pytest.fixture(scope="module", name="master")
def fixture_master():
    return docker.from_env().containers.get(MASTER)


def serving(master):
    """What must not change: llama-server's pid, its settings, and the served files."""
    return (containers.server_pid(master), containers.checked_sh(master, "cat /etc/llama-rpc/server.env"),
            containers.served_files(master))


def update(**extra):
    """deploy.yml's master part on cluster_b (the builds and the worker as the scenario left them), with extra vars."""
    command = ["ansible-playbook", "-i", containers.scenario_inventory(), "--limit", CLUSTER,
               str(ROOT / "playbooks" / "deploy.yml"), "--tags", "rpc_master", "-e", json.dumps(extra)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
    return " ".join((run.stdout + run.stderr).split()), run.returncode


def test_the_cluster_speculates_before_the_updates(master):
    """The refusals below are of a server in use that speculates: its settings name its draft."""
    env = containers.checked_sh(master, "cat /etc/llama-rpc/server.env")
    assert "LLAMA_ARG_SPEC_TYPE=draft-simple" in env and "LLAMA_ARG_SPEC_DRAFT_MODEL=" in env, env


def test_a_draft_of_another_vocabulary_is_refused_before_any_change(master, tmp_path):
    """Fetched from the model host (its checksum right), so it comes as a release: the plan refuses it, and it is never
    placed (it stays staged, as a refused model does); the deploy's hold on the idle stop is gone."""
    foreign = tiny_model.write_model(tmp_path / "other-vocab.gguf", vocab=400)
    master.put_archive("/srv/model-source", containers.tar_of(foreign))
    before = serving(master)
    output, returncode = update(rpc_master_spec_type="draft-simple", rpc_master_spec_draft_src=DRAFT_HOST + "/other-vocab.gguf",
                                rpc_master_spec_draft_sha256=hashlib.sha256(foreign.read_bytes()).hexdigest(),
                                rpc_master_spec_draft_sha256sums="")
    assert returncode != 0 and "the draft model cannot draft for the model: their EOS tokens differ (261 in the model " \
        "(tiny), 399 in the draft (other-vocab)) (llama-server would drop it" in output, output[-3000:]
    assert "or rpc_master_spec_type to an n-gram kind, which needs no draft. Nothing the master serves changed: " \
        "llama-server still serves" in output, output[-3000:]
    assert serving(master) == before
    drafts = containers.checked_sh(master, f"ls -A {DRAFTS}")
    assert not [name for name in drafts.split() if name.startswith("other-vocab")], drafts
    assert "other-vocab-" in containers.checked_sh(master, f"ls -A {DRAFTS}/.incoming"), "fetched and staged, not placed"
    assert containers.sh(master, f"test -e {HOLD}")[0] != 0, "the refused deploy left its hold on the idle stop"


def test_a_draft_url_that_fails_is_refused_by_its_variables_before_any_change(master):
    before = serving(master)
    output, returncode = update(rpc_master_spec_type="draft-simple",
                                rpc_master_spec_draft_src=DRAFT_HOST + "/no-such-draft.gguf",
                                rpc_master_spec_draft_sha256="c" * 64, rpc_master_spec_draft_sha256sums="")
    assert returncode != 0 and "The draft model (%s/no-such-draft.gguf) is not on %s" % (DRAFT_HOST, MASTER) in output \
        and "is not at its source (HTTP 404): check rpc_master_spec_draft_src" in output, output[-3000:]
    assert "Nothing the master serves changed: llama-server still serves" in output, output[-3000:]
    assert serving(master) == before
    assert containers.sh(master, f"test -e {HOLD}")[0] != 0, "the refused deploy left its hold on the idle stop"


def test_draft_mtp_on_a_model_without_prediction_layers_is_refused_before_any_change(master):
    """draft-mtp drafts with the model's own multi-token-prediction layers: the scenario's model has none, which the plan
    says before anything changes (llama.cpp would not draft with it)."""
    before = serving(master)
    output, returncode = update(rpc_master_spec_type="draft-mtp", rpc_master_spec_draft_src="",
                                rpc_master_spec_draft_sha256="", rpc_master_spec_draft_sha256sums="")
    assert returncode != 0 and "has no multi-token-prediction layers (llama.nextn_predict_layers), which draft-mtp " \
        "drafts with. Set rpc_master_spec_type to a kind that drafts otherwise" in output, output[-3000:]
    assert "Nothing the master serves changed: llama-server still serves" in output, output[-3000:]
    assert serving(master) == before
    assert containers.sh(master, f"test -e {HOLD}")[0] != 0, "the refused deploy left its hold on the idle stop"
