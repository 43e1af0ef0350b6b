"""The model_fetch action plugin: the module called again and again until the release is whole, the progress between
calls, and a lease on the host that a killed run stops renewing (no download outlives it)."""

import os
from types import SimpleNamespace

from ansible_collections.graviton.llama_rpc.plugins.action import model_fetch as action


class Host:
    """What the plugin asks of its connection and of the module: each call's answer in turn, and the commands run."""

    def __init__(self, steps):
        self.steps, self.calls, self.commands = list(steps), [], []


def plugin(host, check_mode=False):
    """The action plugin with its task and connection as Ansible gives them, the module's calls answered by `host`."""
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = SimpleNamespace(args={"progress_seconds": 5, "parts": []}, check_mode=check_mode, async_val=0)
    plugin._connection = SimpleNamespace(_shell=SimpleNamespace(join_path=os.path.join, tmpdir="/tmp/ansible-tmp-x"))
    plugin._make_tmp_path = lambda: "/tmp/ansible-tmp-x"
    plugin._remove_tmp_path = lambda path: None
    plugin._low_level_execute_command = lambda command, sudoable=True: host.commands.append(command) or {"rc": 0}

    def execute(module_name, module_args, task_vars):
        host.calls.append(module_args)
        return host.steps.pop(0)
    plugin._execute_module = execute
    return plugin


def run(plugin):
    # ActionBase.run's own checks (the task's async, its connection) are Ansible's: only this plugin's loop is tested
    original = action.ActionBase.run
    action.ActionBase.run = lambda self, tmp=None, task_vars=None: {}
    try:
        return plugin.run(task_vars={"inventory_hostname": "master"})
    finally:
        action.ActionBase.run = original


def test_the_module_is_called_until_done_with_a_lease_it_can_see():
    host = Host([{"done": False, "changed": True, "fetched_bytes": 10, "bytes_done": 10, "bytes_total": 30},
                 {"done": True, "changed": False, "fetched_bytes": 20, "bytes_done": 30, "bytes_total": 30}])
    result = run(plugin(host))
    assert result["done"] and result["changed"] and result["fetched_bytes"] == 30
    assert len(host.calls) == 2 and all(call["lease_file"] == "/tmp/ansible-tmp-x/fetch.lease" for call in host.calls)
    assert all(call["lease_seconds"] == action.LEASE_SECONDS and call["step_seconds"] == 5 for call in host.calls)
    assert host.commands[0] == "touch /tmp/ansible-tmp-x/fetch.lease"  # renewed as each call begins


def test_the_result_gives_each_part_s_bytes_over_the_run_and_where_the_run_took_it_up():
    """Each call reports its own bytes and where it went on from; the run's result is the last call's, with the run's
    figures: a call that only ended a part's hash (no resumed_from) does not hide where the run resumed it."""
    def part(number, fetched, **resumed):
        return dict(number=number, state="downloading", fetched=fetched, **resumed)
    host = Host([{"done": False, "fetched_bytes": 7, "parts": [part(1, 4, resumed_from=100), part(2, 3, resumed_from=0)]},
                 {"done": False, "fetched_bytes": 5, "parts": [part(1, 5, resumed_from=104), part(2, 0)]},
                 {"done": True, "fetched_bytes": 0, "parts": [part(1, 0), part(2, 0)]}])
    result = run(plugin(host))
    assert result["fetched_bytes"] == 12
    assert result["parts"] == [part(1, 9, resumed_from=100), part(2, 3, resumed_from=0)]


def test_a_killed_run_makes_no_new_call_whose_lease_would_be_fresh_again(monkeypatch):
    host = Host([{"done": False, "fetched_bytes": 10, "bytes_done": 10, "bytes_total": 30}] * 3)
    parent = os.getppid()
    # the run's main process is gone once the first call has begun: this worker process is orphaned
    monkeypatch.setattr(action.os, "getppid", lambda: parent if not host.calls else 1)
    result = run(plugin(host))
    assert len(host.calls) == 1
    assert result["failed"] and "the run was killed" in result["msg"]


def test_check_mode_calls_once_without_a_lease():
    host = Host([{"done": False, "bytes_done": 0, "bytes_total": 30}])
    result = run(plugin(host, check_mode=True))
    assert len(host.calls) == 1 and "lease_file" not in host.calls[0] and host.commands == []
    assert result["changed"] is False


def test_the_progress_line_says_bytes_rate_and_time_left():
    line = action.progress_line("master", {"bytes_done": 2e9, "bytes_total": 4e9,
                                           "parts": [{"number": 1, "state": "verified"}, {"number": 2, "state": "fetching"}]},
                                0, action.time.monotonic() - 10)
    assert line.startswith("master: model 2.00 GB of 4.00 GB (50.0%), 0.20 GB/s") and "about 10s left" in line
    assert line.endswith("parts: 1 verified, 2 fetching")


def test_the_progress_line_says_over_how_many_connections_and_why_one():
    line = action.progress_line("master", {"bytes_done": 1e9, "bytes_total": 4e9, "parts": [
        {"number": 1, "state": "downloading", "connections": 8},
        {"number": 2, "state": "downloading", "note": "its source answers no byte ranges: fetched over one connection"},
        {"number": 3, "state": "verifying", "connections": 8}]}, 0, action.time.monotonic() - 10)
    assert line.endswith("parts: 1 downloading over 8 connections, 2 downloading (its source answers no byte ranges: "
                         "fetched over one connection), 3 verifying"), line
