"""The console_host_keys filter: known_hosts lines from the host key block cloud-init prints on the console."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.console_host_keys import console_host_keys

ED25519 = "AAAAC3NzaC1lZDI1NTE5AAAAIIxTPTLfejpC0/R4reCU+04F80r8qkqPZw+Ha+zStp7u"
ECDSA = "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBM+YIJLB"
# As EC2's console shows it (cloud-init's keys_to_console), with the rest of the boot around it and CR LF endings.
CONSOLE = ("[   12.3] cloud-init[712]: Cloud-init v. 24.4 running 'modules:final'\r\n"
           "-----BEGIN SSH HOST KEY KEYS-----\r\n"
           f"ecdsa-sha2-nistp256 {ECDSA} root@ip-10-0-1-10\r\n"
           f"ssh-ed25519 {ED25519} root@ip-10-0-1-10\r\n"
           "-----END SSH HOST KEY KEYS-----\r\n"
           "[   13.0] cloud-init[712]: Cloud-init v. 24.4 finished\r\n")


def test_known_hosts_lines_under_the_address_given():
    expected = [f"203.0.113.10 ecdsa-sha2-nistp256 {ECDSA}", f"203.0.113.10 ssh-ed25519 {ED25519}"]
    assert console_host_keys(CONSOLE, "203.0.113.10") == expected


def test_the_last_boot_counts():
    rekeyed = ED25519[:-4] + "AAAA"  # the host was rebuilt: new keys, printed again
    keys = console_host_keys(CONSOLE + "reboot\n" + CONSOLE.replace(ED25519, rekeyed), "10.0.1.11")
    assert keys == [f"10.0.1.11 ecdsa-sha2-nistp256 {ECDSA}", f"10.0.1.11 ssh-ed25519 {rekeyed}"]


def test_terminal_control_sequences_are_not_text():
    """systemd's boot status on a serial console moves the cursor (ESC M, ESC [K, colours) between the lines other
    programs print: a block it lands in still gives its keys (a test run here once failed on a lone ESC M in the block)."""
    noisy = CONSOLE.replace(f"ssh-ed25519 {ED25519}", f"\x1bM\r\x1b[K\r\nssh-ed25519 \x1b[0m{ED25519}")
    assert console_host_keys(noisy, "10.0.1.11") == [f"10.0.1.11 ecdsa-sha2-nistp256 {ECDSA}", f"10.0.1.11 ssh-ed25519 {ED25519}"]
    # what is left of a status line is still not a key
    status = CONSOLE.replace(f"ssh-ed25519 {ED25519}", "\x1b[0;32m  OK  \x1b[0m] Started ssh.service")
    with pytest.raises(AnsibleFilterError, match="is not an SSH public key"):
        console_host_keys(status, "10.0.1.11")


@pytest.mark.parametrize("console, address, message", [
    ("[    1.0] booting\n", "10.0.1.11", "no SSH host keys for 10.0.1.11 in the console output"),
    ("-----BEGIN SSH HOST KEY KEYS-----\nnot a key\n-----END SSH HOST KEY KEYS-----\n", "10.0.1.11", "is not an SSH public key"),
    ("-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 %%%%\n-----END SSH HOST KEY KEYS-----\n", "10.0.1.11", "is not an SSH public key"),
    ("-----BEGIN SSH HOST KEY KEYS-----\n-----END SSH HOST KEY KEYS-----\n", "10.0.1.11", "block in the console output is empty"),
    (CONSOLE, "10.0.1.11 10.0.1.12", "is not one host name or address"),
    (CONSOLE, "", "is not one host name or address"),
])
def test_what_is_no_host_key_block_is_refused(console, address, message):
    with pytest.raises(AnsibleFilterError, match=message):
        console_host_keys(console, address)
