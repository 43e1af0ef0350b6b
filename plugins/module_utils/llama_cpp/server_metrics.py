# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama-server's /metrics (with --metrics): Prometheus's text format, its series without labels
(llamacpp:requests_processing, llamacpp:requests_deferred, the token counters)."""

from __future__ import annotations

BUSY = ("llamacpp:requests_processing", "llamacpp:requests_deferred")


class MetricsError(ValueError):
    """Text that is not llama-server's /metrics."""


def parse(text):
    """{series name: value} of the samples in text; comments and blank lines skipped. A line that is no sample (name,
    then a number) raises MetricsError."""
    figures = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _space, rest = line.partition(" ")
        try:
            figures[name] = float(rest.split()[0])
        except (IndexError, ValueError):
            raise MetricsError("line %d of the metrics is no sample: %r" % (number, line[:80]))
    return figures


def busy(text):
    """The requests llama-server is processing or holding for a free slot; 0 for text without either series (a
    server that gave no figures has nothing in flight that could end)."""
    figures = parse(text)
    return int(sum(figures.get(name, 0.0) for name in BUSY))
