# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""What llama-server's daemons read of it: its unit as systemd shows it, and its /metrics. Shared by the watchdog
(llama-server-watchdog.py) and the idle stop (llama-server-idle-stop.py), which import it from their own directory.

llama.cpp's RPC client has no timeouts: a worker that stalls blocks llama-server's main loop, but its HTTP threads still
answer, /metrics included (measured: at once, with the figures of the last finished step). So Server.figures() tells
apart a server that cannot say (starting, loading, stopping: None), one whose /metrics gives no answer in time (STUCK),
and the figures of one that answers.
"""

import subprocess
import urllib.error
import urllib.request

STUCK = "stuck"  # figures(): /metrics gave no answer within the timeout
SERVED = ("llamacpp:n_decode_total", "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
          "llamacpp:tokens_predicted_total")  # counters that any served request moves


def parse_show(shown):
    """The invocation id in `systemctl show --property=ActiveState,InvocationID` output, or None when the unit is not
    active (stopped, starting, stopping)."""
    state = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    if state.get("ActiveState") != "active":
        return None
    return state.get("InvocationID") or None


def parse_metrics(text):
    """From llama-server's /metrics (Prometheus text): busy (requests processed or deferred), steps (decode steps so
    far) and served (the counters of SERVED, by name)."""
    values = dict(line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#") and " " in line)
    figure = {name: float(values.get(name, 0)) for name in SERVED + ("llamacpp:requests_processing",
                                                                     "llamacpp:requests_deferred")}
    return {"busy": figure["llamacpp:requests_processing"] + figure["llamacpp:requests_deferred"] > 0,
            "steps": figure["llamacpp:n_decode_total"], "served": {name: figure[name] for name in SERVED},
            "processing": figure["llamacpp:requests_processing"], "deferred": figure["llamacpp:requests_deferred"]}


class Server:
    """The llama-server unit and its /metrics, as systemd and HTTP show them."""

    def __init__(self, url, unit, timeout, api_key):
        self.url, self.unit, self.timeout, self.api_key = url, unit, timeout, api_key

    def invocation(self):
        return parse_show(subprocess.run(["systemctl", "show", self.unit, "--property=ActiveState,InvocationID"],
                                         check=False, capture_output=True, text=True).stdout)

    def figures(self):
        """parse_metrics of /metrics; None while the server cannot say (starting, loading, stopping: clients get an
        error at once then); STUCK when /metrics gets no answer within the timeout."""
        request = urllib.request.Request(self.url + "/metrics",
                                         headers={"Authorization": "Bearer " + self.api_key} if self.api_key else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                text = reply.read().decode("utf-8", "replace")
        except urllib.error.HTTPError:
            return None  # 503 while loading
        except urllib.error.URLError as error:
            return STUCK if isinstance(error.reason, TimeoutError) else None  # refused: starting or stopping
        except TimeoutError:
            return STUCK  # connected, and no answer in time
        except OSError:
            return None  # reset: stopping
        return parse_metrics(text)
