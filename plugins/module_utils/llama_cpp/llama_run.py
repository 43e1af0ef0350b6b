# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a llama.cpp program from a module: GGML_NO_BACKTRACE=1 (a crash never starts gdb), a time limit,
and a failure that shows the end of the program's log."""

from __future__ import annotations

import os
import time

# coreutils timeout exits 124 when the limit was reached and TERM ended the program. A program that outlives TERM is
# sent KILL after KILL_AFTER seconds, to the whole process group, timeout included (it then ends with -9, as a program
# killed by anyone else would): so a failure that ended at or after the limit counts as the limit's doing.
TIMED_OUT = 124
KILL_AFTER = 10


def run(module, command, timeout, **details):
    """Run command; fail the module (with details) on a timeout or a non-zero exit. Returns
    (stdout as bytes, stderr decoded; bytes that are not UTF-8 are replaced)."""
    name = os.path.basename(command[0])
    # run_command has no time limit of its own: coreutils timeout (on every Linux host) gives it one.
    # run_command gives the program SIGPIPE's default, which kills a master writing to a worker that is gone without a
    # word; ignored (coreutils env), the write fails and llama.cpp says what failed (as under systemd, which ignores it).
    # expand_user_and_vars=False: a prompt's '$' or '~' is text, not a variable.
    started = time.monotonic()
    rc, stdout, stderr = module.run_command(["env", "--ignore-signal=PIPE",
                                             "timeout", "--kill-after=%d" % KILL_AFTER, str(int(timeout))] + list(command),
                                            environ_update={"GGML_NO_BACKTRACE": "1"}, encoding=None,
                                            expand_user_and_vars=False)
    log = stderr.decode("utf-8", errors="replace")
    if rc == TIMED_OUT or (rc != 0 and time.monotonic() - started >= timeout):
        module.fail_json(msg="%s ran longer than %d s (timeout)" % (name, timeout), command=command, **details)
    if rc != 0:
        module.fail_json(msg="%s exited with %d: %s" % (name, rc, log[-3000:]), rc=rc, command=command, **details)
    return stdout, log
