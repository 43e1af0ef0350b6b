# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model_fetch module, called again and again, each call working for at most progress_seconds, with the progress
printed between calls; the whole transfer bounded by total_timeout. A module cannot print while it runs, and a 40 GB
download must say how it is doing (the module's own documentation has the options).

While a call runs, a thread here touches a lease file on the host every few seconds (its own commands through the
connection, without become: the file is in the task's temporary directory, the connection user's); the module stops
once the lease is older than LEASE_SECONDS. A run killed on the controller (its main process gone, or this worker
with it) renews nothing, so no download outlives it by more than that."""

from __future__ import annotations

import os
import shlex
import threading
import time
import uuid

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def human_bytes(count):
    return "%.2f GB" % (count / 1e9) if count >= 1e8 else "%.1f MB" % (count / 1e6)


def human_seconds(seconds):
    seconds = int(seconds)
    if seconds >= 3600:
        return "%dh %02dmin" % (seconds // 3600, seconds % 3600 // 60)
    return "%dmin %02ds" % (seconds // 60, seconds % 60) if seconds >= 60 else "%ds" % seconds


def progress_line(host, step, started_done, started_at):
    """One line a person reads: bytes, percent, rate, time left, and what each part is doing."""
    if step.get("waiting_for"):
        return "%s: model fetch waiting for another one on the master to end (pid %s)" % (host, step["waiting_for"])
    done, total = step.get("bytes_done", 0), step.get("bytes_total", 0)
    elapsed = max(time.monotonic() - started_at, 1e-6)
    rate = (done - started_done) / elapsed
    line = "%s: model %s of %s" % (host, human_bytes(done), human_bytes(total) if total else "?")
    if total:
        line += " (%.1f%%)" % (100.0 * done / total)
    if rate > 0:
        line += ", %s/s" % human_bytes(rate)
        if total:
            line += ", about %s left" % human_seconds((total - done) / rate)
    states = ["%d %s%s" % (part["number"], part["state"],
                           " over %d connections" % part["connections"] if part.get("connections", 1) > 1
                           and part["state"] == "downloading" else " (%s)" % part["note"] if part.get("note") else "")
              for part in step.get("parts", [])]
    return line + "; parts: " + ", ".join(states)


class RunTally:
    """What a run did over its calls, each of which reports only its own: the bytes each part fetched, and where each
    part stood when the run first took it up (resumed_from)."""

    def __init__(self):
        self.fetched_bytes, self.fetched, self.resumed_from = 0, {}, {}

    def add(self, step):
        self.fetched_bytes += int(step.get("fetched_bytes") or 0)
        for part in step.get("parts", []):
            number = part["number"]
            self.fetched[number] = self.fetched.get(number, 0) + int(part.get("fetched") or 0)
            if "resumed_from" in part:
                self.resumed_from.setdefault(number, part["resumed_from"])

    def apply(self, step):
        """The last call's result, with the run's figures in place of that call's."""
        step["fetched_bytes"] = self.fetched_bytes
        for part in step.get("parts", []):
            part["fetched"] = self.fetched.get(part["number"], 0)
            if part["number"] in self.resumed_from:
                part["resumed_from"] = self.resumed_from[part["number"]]


LEASE_SECONDS = 15
LEASE_EVERY = 4  # seconds between two renewals: a slow connection still renews within the lease


class Lease:
    """Renews the host's lease file while a module call runs, as long as the controller's main process lives."""

    def __init__(self, action, path):
        self.action, self.path = action, path
        self.parent = os.getppid()  # the main ansible-playbook: another pid once it is gone
        self.stop = threading.Event()
        self.thread = None

    def renew(self):
        self.action._low_level_execute_command("touch %s" % shlex.quote(self.path), sudoable=False)

    def alive(self):
        """Whether the run that called this action still lives (a killed one leaves this worker process orphaned)."""
        return os.getppid() == self.parent

    def _run(self):
        while not self.stop.wait(LEASE_EVERY):
            if not self.alive():
                return  # the run was killed: let the lease run out
            try:
                self.renew()
            except Exception:  # pylint: disable=broad-except  # a failed renewal is the lease running out
                continue

    def __enter__(self):
        self.renew()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.stop.set()
        self.thread.join()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        arguments = dict(self._task.args)
        progress_seconds = int(arguments.pop("progress_seconds", 30))
        total_timeout = int(arguments.pop("total_timeout", 0))
        if progress_seconds < 1 or total_timeout < 0:
            result.update(failed=True, msg="progress_seconds must be 1 or more, total_timeout 0 (no bound) or more")
            return result
        host = task_vars.get("inventory_hostname", "") if task_vars else ""
        started_at = time.monotonic()
        deadline = started_at + total_timeout if total_timeout else None
        changed, first_done, tally = False, None, RunTally()
        run_id = uuid.uuid4().hex  # the module counts failed attempts in a row over this run's calls
        try:
            lease = None if self._task.check_mode else \
                Lease(self, self._connection._shell.join_path(self._make_tmp_path(), "fetch.lease"))
            while True:
                if lease is not None and not lease.alive():  # killed: no new call, whose lease would be fresh again
                    step = dict(failed=True, msg="the run was killed: the fetch stops (the next run resumes it)")
                    break
                step_seconds = progress_seconds
                if deadline is not None:
                    step_seconds = max(1, min(progress_seconds, int(deadline - time.monotonic())))
                module_args = dict(arguments, step_seconds=step_seconds, run_id=run_id)
                if lease is None:
                    step = self._execute_module(module_name="graviton.llama_rpc.model_fetch", module_args=module_args,
                                                task_vars=task_vars)
                else:
                    with lease:
                        step = self._execute_module(module_name="graviton.llama_rpc.model_fetch",
                                                    module_args=dict(module_args, lease_file=lease.path,
                                                                     lease_seconds=LEASE_SECONDS),
                                                    task_vars=task_vars)
                changed = changed or bool(step.get("changed"))
                tally.add(step)
                if first_done is None and not step.get("waiting_for"):
                    first_done = step.get("bytes_done", 0) - step.get("fetched_bytes", 0)
                if step.get("failed") or step.get("done") or self._task.check_mode:
                    break
                display.display(progress_line(host, step, first_done or 0, started_at))
                if deadline is not None and time.monotonic() >= deadline:
                    step.update(failed=True, msg="the model's parts were not all fetched and verified within %ds "
                                "(rpc_master_model_download_timeout): the bytes fetched are kept, and the next run "
                                "resumes. Raise the bound, or give the master a faster way to the source." % total_timeout)
                    break
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        step["changed"] = changed
        tally.apply(step)
        step["seconds"] = round(time.monotonic() - started_at, 1)
        result.update(step)
        return result
