"""local_fact on a real directory: what it writes is the text the roles' copy of to_nice_json wrote, a second run
changes nothing, check mode writes nothing, and the facts it returns are what setup reads."""

import grp
import json
import os
import pwd

import pytest
from ansible.plugins.filter.core import to_nice_json

from ansible_collections.graviton.llama_rpc.plugins.modules import local_fact as module

from tests.unit.plugins.module_runner import run_module

STATE = {"bin_dir": "/opt/llama.cpp/b11312/bin", "workers": ["10.0.0.2:50052"], "port": 50052, "enabled": True,
         "nested": {"ü": "é", "none": None, "ratio": 0.5}}
# The file's owner and group: root on a host (the defaults); here whoever runs the tests, since only root may chown.
ME = {"owner": pwd.getpwuid(os.geteuid()).pw_name, "group": grp.getgrgid(os.getegid()).gr_name}


def publish(capsys, fact_path, content=None, **extra):
    return run_module(module.main, capsys, name="llama_rpc_build", content=STATE if content is None else content,
                      fact_path=str(fact_path), **ME, **extra)


def test_the_text_is_what_to_nice_json_wrote():
    """Hosts published by the roles' copy task are not rewritten on upgrade: the same bytes."""
    assert module.fact_text(STATE) == to_nice_json(STATE) + "\n"


def test_it_creates_the_directory_and_the_file_and_returns_the_fact(capsys, tmp_path):
    facts = tmp_path / "facts.d"
    result = publish(capsys, facts)
    path = facts / "llama_rpc_build.fact"
    assert result["changed"] is True and result["path"] == str(path)
    assert json.loads(path.read_text()) == STATE
    assert result["ansible_facts"]["ansible_local"] == {"llama_rpc_build": STATE}
    assert oct(facts.stat().st_mode & 0o777) == "0o755" and oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_second_run_changes_nothing(capsys, tmp_path):
    publish(capsys, tmp_path)
    before = (tmp_path / "llama_rpc_build.fact").stat()
    result = publish(capsys, tmp_path)
    assert result["changed"] is False
    assert (tmp_path / "llama_rpc_build.fact").stat().st_ino == before.st_ino  # not even rewritten


def test_a_new_state_replaces_the_file_and_a_wrong_mode_is_mended(capsys, tmp_path):
    publish(capsys, tmp_path)
    path = tmp_path / "llama_rpc_build.fact"
    path.chmod(0o600)
    assert publish(capsys, tmp_path)["changed"] is True and oct(path.stat().st_mode & 0o777) == "0o644"
    result = publish(capsys, tmp_path, content={"bin_dir": "/opt/other"})
    assert result["changed"] is True and json.loads(path.read_text()) == {"bin_dir": "/opt/other"}
    assert [entry.name for entry in tmp_path.iterdir()] == ["llama_rpc_build.fact"]  # no temporary file left


def test_every_local_fact_is_read_back_as_setup_reads_them(capsys, tmp_path):
    """The other roles' facts stay in ansible_local: JSON, INI, and an executable fact, read by setup's own collector."""
    (tmp_path / "llama_rpc_worker.fact").write_text('{"endpoints": ["10.0.0.2:50052"]}\n')
    (tmp_path / "site.fact").write_text("[general]\nowner = ml-platform\n")
    script = tmp_path / "clock.fact"
    script.write_text('#!/bin/sh\necho \'{"ticks": 7}\'\n')
    script.chmod(0o755)
    local = publish(capsys, tmp_path)["ansible_facts"]["ansible_local"]
    assert local == {"llama_rpc_build": STATE, "llama_rpc_worker": {"endpoints": ["10.0.0.2:50052"]},
                     "site": {"general": {"owner": "ml-platform"}}, "clock": {"ticks": 7}}


def test_check_mode_writes_nothing_and_returns_what_the_host_has(capsys, tmp_path):
    facts = tmp_path / "facts.d"
    result = publish(capsys, facts, _ansible_check_mode=True)
    assert result["changed"] is True and not facts.exists()
    assert result["ansible_facts"]["ansible_local"] == {}
    publish(capsys, facts)
    result = publish(capsys, facts, content={"bin_dir": "/opt/other"}, _ansible_check_mode=True)
    assert result["changed"] is True and result["ansible_facts"]["ansible_local"] == {"llama_rpc_build": STATE}
    assert json.loads((facts / "llama_rpc_build.fact").read_text()) == STATE


def test_diff_mode_shows_the_text_before_and_after(capsys, tmp_path):
    publish(capsys, tmp_path, content={"bin_dir": "/opt/old"})
    diff = publish(capsys, tmp_path, _ansible_diff=True)["diff"]
    assert diff["before"] == module.fact_text({"bin_dir": "/opt/old"}) and diff["after"] == module.fact_text(STATE)
    assert diff["before_header"] == diff["after_header"] == str(tmp_path / "llama_rpc_build.fact")


@pytest.mark.parametrize("name", ["../cron", "llama-rpc", "a.b", ""])
def test_a_name_that_is_not_a_fact_name_is_refused(capsys, tmp_path, name):
    result = run_module(module.main, capsys, name=name, content=STATE, fact_path=str(tmp_path), **ME)
    assert result["failed"] is True and "letters, digits and underscores" in result["msg"], result
    assert not list(tmp_path.iterdir())


def test_a_fact_path_that_is_a_file_is_named(capsys, tmp_path):
    blocker = tmp_path / "facts.d"
    blocker.write_text("")
    result = publish(capsys, blocker)
    assert result["failed"] is True and f"Check that {blocker} is a directory" in result["msg"], result


def withdraw(capsys, fact_path, **extra):
    return run_module(module.main, capsys, name="llama_rpc_build", state="absent", fact_path=str(fact_path), **extra)


def test_absent_removes_the_file_and_the_fact_and_keeps_the_others(capsys, tmp_path):
    publish(capsys, tmp_path)
    (tmp_path / "llama_rpc_worker.fact").write_text('{"endpoints": ["10.0.0.2:50052"]}\n')
    result = withdraw(capsys, tmp_path, _ansible_diff=True)
    assert result["changed"] is True and not (tmp_path / "llama_rpc_build.fact").exists()
    assert result["ansible_facts"]["ansible_local"] == {"llama_rpc_worker": {"endpoints": ["10.0.0.2:50052"]}}
    assert result["diff"]["before"] == module.fact_text(STATE) and result["diff"]["after"] == ""
    again = withdraw(capsys, tmp_path)
    assert again["changed"] is False and again["ansible_facts"]["ansible_local"] == result["ansible_facts"]["ansible_local"]


def test_absent_on_a_host_without_facts_changes_nothing_and_check_mode_removes_nothing(capsys, tmp_path):
    result = withdraw(capsys, tmp_path / "facts.d")
    assert result["changed"] is False and result["ansible_facts"]["ansible_local"] == {}
    assert not (tmp_path / "facts.d").exists()
    publish(capsys, tmp_path)
    result = withdraw(capsys, tmp_path, _ansible_check_mode=True)
    assert result["changed"] is True and result["ansible_facts"]["ansible_local"] == {"llama_rpc_build": STATE}
    assert (tmp_path / "llama_rpc_build.fact").exists()


def test_present_without_content_is_refused(capsys, tmp_path):
    result = run_module(module.main, capsys, name="llama_rpc_build", fact_path=str(tmp_path), **ME)
    assert result["failed"] is True and "content" in result["msg"], result
