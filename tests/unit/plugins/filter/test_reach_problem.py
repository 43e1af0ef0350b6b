"""The reach_problem filter: the host and the fix, from the first command's result (ssh's and sudo's own words)."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.filter.reach_problem import reach_problem

MASTER = "203.0.113.10"
WORKER = "10.0.1.11"
CHANGED = ("Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
           "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
           "Host key for {} has changed and you have requested strict checking.\r\nHost key verification failed.")


@pytest.mark.parametrize("result, expected", [
    ({"unreachable": True, "msg": CHANGED.format(WORKER)},
     ["worker-1 (10.0.1.11): its SSH host key is not the one known_hosts holds", "ssh-keygen -R 10.0.1.11",
      "Host key verification failed."]),
    ({"unreachable": True, "msg": CHANGED.format(MASTER)},
     ["worker-1 (10.0.1.11): the jump host 203.0.113.10's SSH host key", "ssh-keygen -R 203.0.113.10"]),
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: ubuntu@203.0.113.10: Permission denied (publickey).\r\n"
                                  "Connection closed by UNKNOWN port 65535"},
     ["worker-1 (10.0.1.11) is reached through the jump host 203.0.113.10, which refused the SSH key offered for ubuntu",
      "ssh does not hand -i on to ProxyJump"]),
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: ubuntu@10.0.1.11: Permission denied (publickey)."},
     ["worker-1 (10.0.1.11) refused the SSH key offered for ubuntu (publickey)"]),
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: ssh: connect to host 10.0.1.11 port 22: No route to host"},
     ["worker-1 (10.0.1.11) cannot be reached: Failed to connect to the host via ssh: ssh: connect to host 10.0.1.11 port 22: No route to host"]),
    ({"failed": True, "msg": "Missing sudo password"},
     ["worker-1 (10.0.1.11): sudo asks ubuntu for a password", "--ask-become-pass", "90-cloud-init-users"]),
    ({"failed": True, "msg": "Task failed: Premature end of stream waiting for become success.", "module_stderr": "sudo: a password is required"},
     ["sudo asks ubuntu for a password"]),
    ({"changed": False, "stdout": "1000", "rc": 0},
     ["worker-1 (10.0.1.11): connected as ubuntu (uid 1000), not as root, and without become", "ansible_become: true"]),
])
def test_each_problem_names_the_host_and_the_fix(result, expected):
    problem = reach_problem(result, "worker-1", WORKER, "ubuntu")
    for text in expected:
        assert text in problem, problem


def test_root_is_no_problem():
    assert reach_problem({"changed": False, "stdout": "0", "rc": 0}, "worker-1", WORKER, "ubuntu") == ""
