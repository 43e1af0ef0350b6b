"""A model_fetch of the pieces' unit tests: FetchState, FetchHoldings and FetchTransfer together, as the module joins
them, over a state directory of the test's own."""

from types import SimpleNamespace

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_holdings import FetchHoldings
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_state import FetchState
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_transfer import FetchTransfer


class Fetch(FetchState, FetchHoldings, FetchTransfer):
    pass


def fetch(tmp_path, **params):
    (tmp_path / "state").mkdir(exist_ok=True)
    defaults = {"state_dir": str(tmp_path / "state"), "models_dir": str(tmp_path), "token": "", "read_timeout": 5,
                "run_id": "run-1", "recheck": False, "attempts": 3, "lease_file": "", "lease_seconds": 15,
                "step_seconds": 5}
    return Fetch(SimpleNamespace(params=dict(defaults, **params), check_mode=False))
