# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bench's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import os

from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import whole, at_least, sentences


def bench(settings):
    """bench's rules. Beside its variables: worker_total (the workers rpc_master published on the master, None where it
    published none: the role then says to deploy first). bench_compare_with is a file on the controller."""
    s, found = settings, []

    def sizes(name, what):
        values = s[name]
        if not values or not all(at_least(value, 0) for value in values):
            found.append("%s=%s: list %s of 0 or more" % (name, values, what))

    def one_or_more(name):
        if not at_least(s[name], 1):
            found.append("%s=%s: set it to 1 or more" % (name, s[name]))

    sizes("bench_n_prompt", "prompt sizes")
    sizes("bench_n_gen", "generation sizes")
    one_or_more("bench_repetitions")
    one_or_more("bench_tcp_megabytes")
    counts, total = s["bench_worker_counts"], s["worker_total"]
    if not all(at_least(value, 1) for value in counts):
        found.append("bench_worker_counts=%s: list counts of 1 or more, or none (1 to all)" % (counts,))
    elif total is not None and counts and max(whole(value) for value in counts) > total:
        found.append("bench_worker_counts=%s asks for more workers than the cluster has (%d): list counts from 1 to %d, "
                     "or none (1 to all)" % (counts, total, total))
    if not all(at_least(value, 1) for value in s["bench_concurrency"]):
        found.append("bench_concurrency=%s: list numbers of clients of 1 or more, or none (no measurement)"
                     % (s["bench_concurrency"],))
    one_or_more("bench_concurrency_requests")
    one_or_more("bench_concurrency_tokens")
    compare = s["bench_compare_with"]
    if compare and not os.path.isfile(compare):
        found.append("bench_compare_with='%s': give an existing result file on the controller, or nothing" % compare)
    return sentences(found)
