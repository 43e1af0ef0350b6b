"""llama_run: a program's time limit (coreutils timeout), told apart from a program killed for another reason; SIGPIPE
ignored, so a write to a peer that is gone fails with an error the program can name."""

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_run

from tests.unit.plugins.module_runner import patch_module_args


def failure(capsys, command, timeout):
    """What llama_run.run fails the module with, from a real AnsibleModule."""
    with patch_module_args({}), pytest.raises(SystemExit):
        llama_run.run(AnsibleModule(argument_spec={}), command, timeout)
    return json.loads(capsys.readouterr().out)["msg"]


def test_a_program_over_its_limit_is_a_timeout(capsys):
    assert failure(capsys, ["sleep", "30"], 1) == "sleep ran longer than 1 s (timeout)"


def test_a_program_that_ignores_term_is_killed_and_is_a_timeout(capsys, monkeypatch):
    monkeypatch.setattr(llama_run, "KILL_AFTER", 1)
    assert failure(capsys, ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], 1) == "sh ran longer than 1 s (timeout)"


def test_a_program_killed_before_its_limit_is_no_timeout(capsys):
    """A SIGKILL from elsewhere (the OOM killer's): timeout dies of the same signal, so it is no 124 or 137."""
    assert failure(capsys, ["sh", "-c", "kill -9 $$"], 30).startswith("sh exited with -9")


def test_output_and_log_of_a_program_that_succeeds():
    """Its arguments reach it as written: a prompt's '$' and '~' are text, not variables."""
    with patch_module_args({}):
        stdout, log = llama_run.run(AnsibleModule(argument_spec={}), ["printf", "%s", "$HOME ~"], 30)
    assert (stdout, log) == (b"$HOME ~", "")


def test_a_write_to_a_closed_pipe_fails_with_a_message_instead_of_killing_the_program(capsys):
    """As a master writing to a worker that was killed: with SIGPIPE's default the program would die without a word
    (run_command restores the default); ignored, its write fails and it says so."""
    message = failure(capsys, ["sh", "-c", "yes | true; exit 3"], 30)
    assert message.startswith("sh exited with 3: ") and "Broken pipe" in message, message
