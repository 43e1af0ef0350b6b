"""module_utils/model/model_download.py against a model host on loopback (tests/tools/model_server.py, which wants a
bearer token and honours Range): a ranged GET resumes, the one-byte probe gives the size, the token goes to the source's
own host only across a redirect, a redirect loop ends, and each refusal names the variable to change."""

import json
import urllib.request
from urllib.error import HTTPError

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_download

from tests.tools import llama_cpp, model_server

TOKEN = "hf_test_token"
BYTES = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture()
def hosts(tmp_path):
    (tmp_path / "part.gguf").write_bytes(BYTES)
    (tmp_path / "SHA256SUMS").write_text("0" * 64 + "  part.gguf\n")
    servers = [model_server.serve(tmp_path, llama_cpp.free_port(), token=TOKEN),
               model_server.serve(tmp_path, llama_cpp.free_port(), token="")]  # a CDN: no token wanted
    yield ["http://127.0.0.1:%d" % server.server_address[1] for server in servers]
    for server in servers:
        server.shutdown()


def ask(url):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as answer:
        return json.loads(answer.read())


def test_a_ranged_get_resumes_and_the_total_is_the_whole_file(hosts):
    source = model_download.Source(TOKEN, timeout=10)
    with source.open(hosts[0] + "/part.gguf", offset=1000) as response:
        assert response.status == 206 and response.read() == BYTES[1000:]
        assert model_download.total_of(response, 1000) == len(BYTES)
    with source.open(hosts[0] + "/part.gguf") as response:
        assert response.status == 200 and model_download.total_of(response, 0) == len(BYTES)


def test_the_probe_asks_one_byte_for_the_size(hosts):
    assert model_download.Source(TOKEN, timeout=10).size(hosts[0] + "/part.gguf") == len(BYTES)
    assert ask(hosts[0] + "/_sent")["sent"]["part.gguf"] == 1


def test_the_probe_says_whether_the_source_answers_ranges_and_which_file_it_is(hosts):
    source = model_download.Source(TOKEN, timeout=10)
    found = source.probe(hosts[0] + "/part.gguf")
    assert found["total"] == len(BYTES) and found["ranged"], found
    assert set(found["validator"]) == {"ETag", "Last-Modified"}
    with source.open(hosts[0] + "/part.gguf", 4096, last=8191) as response:
        assert response.status == 206 and response.read() == BYTES[4096:8192]
        assert response.headers["Content-Range"] == "bytes 4096-8191/%d" % len(BYTES)
    ask(hosts[0] + "/_control?no_ranges=1")
    found = source.probe(hosts[0] + "/part.gguf")
    assert found["total"] == len(BYTES) and not found["ranged"], found


def test_the_token_goes_to_its_own_host_only(hosts):
    cdn = hosts[1].replace("127.0.0.1", "localhost")  # another host name: the token goes by the name
    ask(hosts[0] + "/_control?redirect=part.gguf:%s/part.gguf" % cdn)
    with model_download.Source(TOKEN, timeout=10).open(hosts[0] + "/part.gguf") as response:
        assert response.read() == BYTES
    assert ask(hosts[0] + "/_sent")["authorized"]["part.gguf"] == [True]  # the hop that redirected
    assert ask(hosts[1] + "/_sent")["authorized"]["part.gguf"] == [False]  # the other host never saw it


def test_a_redirect_loop_is_refused_with_the_variable_to_check(hosts):
    ask(hosts[0] + "/_control?redirect=part.gguf:%s/part.gguf" % hosts[0])
    with pytest.raises(model_download.Refused, match="redirects more than 10 times .* check rpc_master_model_src"):
        model_download.Source(TOKEN, timeout=10).open(hosts[0] + "/part.gguf")


@pytest.mark.parametrize("token, path, message", [
    ("", "/part.gguf", "HTTP 401\\): a gated or private model needs rpc_master_model_token"),
    ("a-wrong-token", "/part.gguf", "with the token given \\(HTTP 403\\): rpc_master_model_token has no access"),
    (TOKEN, "/part-00002.gguf", "is not at its source \\(HTTP 404\\): check rpc_master_model_src"),
])
def test_each_refusal_names_what_to_change(hosts, token, path, message):
    with pytest.raises(HTTPError) as raised:
        model_download.Source(token, timeout=10).open(hosts[0] + path)
    assert raised.value.code in (401, 403, 404)
    with pytest.raises(model_download.Refused, match=message.replace("is not", "part 2 is not")):
        raise model_download.Refused(model_download.refusal("part 2", raised.value, bool(token)))


def test_a_checksum_file_is_text_or_a_refusal(hosts):
    assert model_download.fetch_text(model_download.Source(TOKEN, timeout=10), hosts[0] + "/SHA256SUMS").endswith("part.gguf\n")
    with pytest.raises(model_download.Refused, match="the checksum file \\(rpc_master_model_sha256sums\\)"):
        model_download.fetch_text(model_download.Source("", timeout=10), hosts[0] + "/SHA256SUMS")
    with pytest.raises(model_download.Refused, match="rpc_master_model_sha256sums could not be fetched"):
        model_download.fetch_text(model_download.Source(TOKEN, timeout=2), "http://127.0.0.1:%d/SHA256SUMS" % llama_cpp.free_port())


def test_an_error_no_retry_mends_is_only_401_403_404():
    assert model_download.refusal("part 1", HTTPError("u", 503, "busy", {}, None), True) is None
    assert model_download.refusal("part 1", HTTPError("u", 500, "oops", {}, None), False) is None
