"""A file's page cache: dropped, so that the next read comes from the disk, and measured, to see what a load read."""

import os
import subprocess


def drop(path):
    """The page cache of a file, dropped (the next read comes from the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path):
    """Bytes of the file in the page cache (what a load read of it, after drop())."""
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", str(path)], capture_output=True, text=True,
                         check=True).stdout.strip()
    return int(out or 0)
