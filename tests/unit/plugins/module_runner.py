"""Run one of our modules' main() in-process with given arguments and return its JSON result."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(main, capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        main()
    return json.loads(capsys.readouterr().out)
