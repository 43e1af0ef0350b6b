"""Where a run's CPU goes, by process: the kernel's process accounting (acct(2), records of format v3, written as each
process exits, containers' processes included) summed by command name, with Ansible's own share split into its
ansible-playbook runs, the forks each run makes (one per host and task, skipped tasks included) and the modules it
runs on the hosts. `make bench-test-cpu` records make test with it (tests/bed/cpu_accounting.sh).

    python -m tests.tools.process_accounting on FILE | off | report FILE
"""

import argparse
import collections
import ctypes
import struct
import sys
from dataclasses import dataclass

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (a float, in AHZ
# ticks), utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # the ticks of utime, stime and etime


def comp_t(value):
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    began: float  # seconds since the epoch
    ended: float
    cpu: float  # user + system seconds
    system: float
    command: str  # the kernel's comm: the first 15 bytes of the executable's name


def read(data):
    """The v3 records in data, in the order the processes exited."""
    processes = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        (_flag, version, _tty, _exit, _uid, _gid, pid, ppid, btime, etime, utime, stime,
         *_rest, comm) = RECORD.unpack_from(data, offset)
        if version != 3:
            continue
        system = comp_t(stime) / AHZ
        processes.append(Process(pid, ppid, btime, btime + etime / AHZ, comp_t(utime) / AHZ + system, system,
                                 comm.split(b"\0", 1)[0].decode(errors="replace")))
    return processes


def parent_of(process, by_pid):
    """The recorded process that was process's parent when it began (pids are reused in a long run), or None."""
    for candidate in by_pid.get(process.ppid, ()):
        if candidate.began <= process.began + 1 and process.began <= candidate.ended + 1:
            return candidate
    return None


def ansible_share(processes):
    """Ansible's processes: ansible-playbook runs, their forks (a fork per host and task), and the Python processes a
    shell starts (a module run is `sh -c python3` on its host; a few test helpers start Python so too);
    {kind: (count, CPU-seconds)}."""
    by_pid = collections.defaultdict(list)
    for process in processes:
        by_pid[process.pid].append(process)
    playbook = "ansible-playboo"
    share = collections.defaultdict(lambda: [0, 0.0])
    for process in processes:
        parent = parent_of(process, by_pid)
        if process.command == playbook:
            kind = "forks of ansible-playbook" if parent and parent.command == playbook else "ansible-playbook runs"
        elif process.command.startswith("python") and parent and parent.command == "sh":
            kind = "python started by sh (mostly modules on the hosts)"
        else:
            continue
        share[kind][0] += 1
        share[kind][1] += process.cpu
    return {kind: tuple(value) for kind, value in share.items()}


def report(processes, top=25):
    total = sum(process.cpu for process in processes)
    by_command = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for process in processes:
        entry = by_command[process.command]
        entry[0] += 1
        entry[1] += process.cpu
        entry[2] += process.system
    lines = [f"{len(processes)} processes recorded, {total:.0f} CPU-s (daemons still running, such as dockerd, are not in it)",
             "", "| command | processes | CPU-s | share | of it system |", "|---|---|---|---|---|"]
    for command, (count, cpu, system) in sorted(by_command.items(), key=lambda item: -item[1][1])[:top]:
        lines.append(f"| {command} | {count} | {cpu:.0f} | {100 * cpu / total:.1f}% | {system:.0f} |")
    lines += ["", "| Ansible's part | processes | CPU-s | each |", "|---|---|---|---|"]
    for kind, (count, cpu) in sorted(ansible_share(processes).items()):
        lines.append(f"| {kind} | {count} | {cpu:.0f} | {cpu / count:.3f} |")
    return "\n".join(lines)


def switch(path):
    """Turn the kernel's process accounting on into path, or off (None). Root only."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        error = ctypes.get_errno()
        sys.exit(f"acct({path!r}) failed: errno {error}. Process accounting needs root and a kernel with "
                 "CONFIG_BSD_PROCESS_ACCT (/proc/sys/kernel/acct exists then).")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("on").add_argument("file")
    sub.add_parser("off")
    sub.add_parser("report").add_argument("file")
    arguments = parser.parse_args()
    if arguments.action == "on":
        open(arguments.file, "wb").close()
        switch(arguments.file)
    elif arguments.action == "off":
        switch(None)
    else:
        with open(arguments.file, "rb") as records:
            print(report(read(records.read())))


if __name__ == "__main__":
    main()
