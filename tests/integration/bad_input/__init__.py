"""Every role's bad-input cases, in one place: each input a user can get wrong is refused with a message that names
the variable and what to write, before anything on a host or in the (moto) AWS account changes. Real
ansible-playbook runs against throwaway systemd containers, or against moto's server on loopback for aws_infra.

Refusals that depend on a running cluster's state (a stopped or busy worker, mixed builds, a model larger than the
cluster) are proven where that state exists: the cluster scenario."""

import re


def assert_refused(case, result, messages, untouched):
    """A refusal: the play failed, its output holds every message (stdout and stderr: ansible-core 2.19+ prints a
    task's failure on stderr too), and nothing changed (untouched: what the caller found on the host or account).
    A message is a string, or a compiled pattern where the output may vary (which of parallel requests failed first)."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case}: the play succeeded"
    for message in messages:
        found = message.search(output) if isinstance(message, re.Pattern) else message in output
        assert found, f"{case}: {message!r} not in the output:\n{output[-3000:]}"
    assert untouched, f"{case}: something changed"
