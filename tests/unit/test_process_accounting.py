"""tests/tools/process_accounting.py reads the kernel's acct v3 records (make bench-test-cpu). Records are packed here
as the kernel writes them: a test must not switch accounting itself, as make bench-test-cpu runs these tests under it."""

import pytest

from tests.tools.process_accounting import RECORD, ansible_share, comp_t, read, report


def record(pid, ppid, command, began, seconds, cpu_ticks=0, system_ticks=0, version=3):
    """One record: utime and stime as comp_t (small values are their own encoding), etime in ticks."""
    return RECORD.pack(0, version, 0, 0, 0, 0, pid, ppid, began, seconds * 100.0, cpu_ticks, system_ticks,
                       0, 0, 0, 0, 0, 0, command.encode())


def test_comp_t_is_a_13_bit_mantissa_with_a_base_8_exponent():
    assert comp_t(0x1FFF) == 8191
    assert comp_t((1 << 13) | 5) == 40  # 5 * 8
    assert comp_t((2 << 13) | 3) == 192  # 3 * 64


def test_records_are_read_with_their_times_and_other_versions_are_passed_over():
    data = record(10, 1, "sh", 1000, 2, cpu_ticks=30, system_ticks=(1 << 13) | 2) + record(11, 1, "x", 1000, 1, version=2)
    (process,) = read(data)
    assert (process.pid, process.ppid, process.command) == (10, 1, "sh")
    assert process.began == 1000 and process.ended == 1002
    assert process.system == pytest.approx(0.16) and process.cpu == pytest.approx(0.46)  # 30 ticks user + 16 system


def test_ansible_share_finds_each_process_parent_at_the_time_it_began_though_pids_are_reused():
    playbook = "ansible-playboo"
    data = b"".join([
        record(201, 200, playbook, 1000, 1, cpu_ticks=5),   # a fork of run 200
        record(301, 300, "sh", 1001, 1),                    # sh from docker exec
        record(302, 301, "python3.11", 1001, 1, cpu_ticks=25),  # the module it starts
        record(200, 1, playbook, 1000, 10, cpu_ticks=150),  # the run, exiting after its fork
        record(201, 1, playbook, 1020, 5, cpu_ticks=100),   # pid 201 again, later: a run of its own
        record(202, 201, playbook, 1021, 1, cpu_ticks=4),   # its fork
        record(400, 1, "python3.13", 1030, 1, cpu_ticks=90),  # a test's own Python: no shell above it
    ])
    share = ansible_share(read(data))
    assert share["ansible-playbook runs"] == (2, pytest.approx(2.5))
    assert share["forks of ansible-playbook"] == (2, pytest.approx(0.09))
    assert share["python started by sh (mostly modules on the hosts)"] == (1, pytest.approx(0.25))
    table = report(read(data))
    assert "| ansible-playboo | 4 | 3 |" in table and "| forks of ansible-playbook | 2 | 0 | 0.045 |" in table
