"""Messages the roles build with Jinja filters, rendered by Ansible itself. A regular expression written with doubled
backslashes in a folded YAML string reaches Python doubled (ansible-core 2.17 and 2.21 alike): '\\\\s' was no
whitespace class and '\\\\1' no backreference, so an S3 signature leaked into a refusal. The roles' expressions use no
backslash now. The signature never reaches a message; the draft's fetch names the draft's variables; a reason loses
only its end."""

from pathlib import Path

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

ROOT = Path(__file__).resolve().parents[2]


def task_named(tasks, name):
    for task in tasks:
        if task.get("name") == name:
            return task
        for key in ("block", "rescue", "always"):
            found = task_named(task.get(key) or [], name)
            if found:
                return found
    return None


def render(task_file, name, variables):
    loader = DataLoader()
    path = str(ROOT / task_file)
    try:
        tasks = loader.load_from_file(path, cache="none", trusted_as_template=True)
    except TypeError:  # ansible-core before 2.19
        tasks = loader.load_from_file(path, cache=False)
    task = task_named(tasks, name)
    assert task, name
    return Templar(loader=loader, variables=variables).template(task["ansible.builtin.fail"]["msg"])


def test_a_failed_s3_download_names_no_signature():
    signed = ("https://bucket.s3.eu-west-1.amazonaws.com/m.gguf?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
              "AKIAEXAMPLE%2F20261205%2Fs3%2Faws4_request&X-Amz-Security-Token=sessiontokens&X-Amz-Signature=5ecre7s1gn")
    message = render("roles/rpc_master/tasks/_model.yml", "Say why the model is not on the master, and that nothing served changed",
                     {"rpc_master_model_src": "s3://bucket/m.gguf", "_rpc_master_unchanged": "Nothing changed.",
                      "inventory_hostname": "master", "ansible_failed_result": {"msg": "cannot fetch %s: HTTP 500" % signed}})
    for secret in ("AKIAEXAMPLE", "sessiontokens", "5ecre7s1gn"):
        assert secret not in message, message
    assert "X-Amz-Signature=(hidden)" in message and "X-Amz-Credential=(hidden)&" in message, message


def test_a_failed_draft_fetch_names_the_drafts_variables():
    message = render("roles/rpc_master/tasks/_draft.yml", "Say why the draft is not on the master, and that nothing served changed",
                     {"rpc_master_spec_draft_src": "https://h/d.gguf", "_rpc_master_unchanged": "Nothing changed.",
                      "inventory_hostname": "master",
                      "ansible_failed_result": {"msg": "part 1 (d.gguf) is not at its source (HTTP 404): check "
                                                       "rpc_master_model_src (the set's name) and rpc_master_model_sha256sums."}})
    assert "check rpc_master_spec_draft_src (the set's name) and rpc_master_spec_draft_sha256sums." in message, message


def test_a_reason_loses_only_its_trailing_dots_and_spaces():
    message = render("roles/common/tasks/packages.yml", "Say what to do without a package mirror",
                     {"ansible_failed_result": {"msg": "No package matching 'llama-tools' is available.  "},
                      "inventory_hostname": "host", "common_missing_packages": ["llama-tools"],
                      "common_packages_instead": "an image that has them"})
    assert "No package matching 'llama-tools' is available. The host needs" in " ".join(message.split()), message


UNCHANGED = "Nothing the master serves changed: llama-server still serves /var/lib/llama-models/tiny/tiny.gguf."
REFUSALS = [
    ("roles/rpc_master/tasks/_cluster_check.yml", "Say why the new settings are refused, and that the master serves on as it was",
     "Pre-flight failed: "),
    ("roles/rpc_master/tasks/_preflight.yml", "Say why the model cannot be fetched, and that nothing served changed", ""),
    ("roles/rpc_master/tasks/_model.yml", "Say why the model is not on the master, and that nothing served changed",
     "The model (https://h/m.gguf) was not fetched to master: "),
    ("roles/rpc_master/tasks/_draft.yml", "Say why the draft is not on the master, and that nothing served changed",
     "The draft model (https://h/m.gguf) is not on master: "),
]


@pytest.mark.parametrize("task_file, name, opening", REFUSALS, ids=[refusal[0].rsplit("/", 1)[1] for refusal in REFUSALS])
@pytest.mark.parametrize("reason", ["llama.cpp's projection of the model failed: failed to load model",
                                    "llama.cpp's projection of the model failed: failed to load model.",
                                    "llama.cpp's projection of the model failed: failed to load model.\n"])
def test_a_refusal_is_two_sentences_whatever_its_reason_ends_with(task_file, name, opening, reason):
    """The reason (llama.cpp's words end with no full stop) and the statement that nothing changed never run together."""
    message = render(task_file, name, {"ansible_failed_result": {"msg": reason}, "_rpc_master_unchanged": UNCHANGED,
                                       "rpc_master_model_src": "https://h/m.gguf", "rpc_master_spec_draft_src": "https://h/m.gguf",
                                       "inventory_hostname": "master"})
    assert " ".join(message.split()) == opening + "llama.cpp's projection of the model failed: failed to load model. " + UNCHANGED
