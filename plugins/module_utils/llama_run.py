# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a llama.cpp program from a module: GGML_NO_BACKTRACE=1 (a crash never starts gdb), a time limit,
and a failure that shows the end of the program's log."""

from __future__ import annotations

import os
import subprocess


def run(module, command, timeout, **details):
    """Run command; fail the module (with details) on a timeout or a non-zero exit. Returns
    (stdout as bytes, stderr decoded; bytes that are not UTF-8 are replaced)."""
    name = os.path.basename(command[0])
    try:
        completed = subprocess.run(command, env=dict(os.environ, GGML_NO_BACKTRACE="1"), capture_output=True,
                                   timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        module.fail_json(msg="%s ran longer than %d s (timeout)" % (name, timeout), command=command, **details)
    log = completed.stderr.decode("utf-8", errors="replace")
    if completed.returncode != 0:
        module.fail_json(msg="%s exited with %d: %s" % (name, completed.returncode, log[-3000:]), rc=completed.returncode,
                         command=command, **details)
    return completed.stdout, log
