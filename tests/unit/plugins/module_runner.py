"""Run one of our modules' main() in-process with given arguments and return its JSON result."""

import json

import pytest

try:  # ansible-core 2.19 and later
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.17 and 2.18 (requires_ansible admits 2.17): what that helper replaced
    import contextlib

    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args):
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved


def run_module(main, capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        main()
    return json.loads(capsys.readouterr().out)
