"""Speculative decoding's kinds and the draft's vocabulary rule (module_utils/llama_cpp/speculative.py), case by case on
metadata, and on real files read with the tokens kept whole. Against llama-server's own verdict on the same pairs:
tests/integration/test_speculative.py."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import speculative
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from tests.tools import llama_cpp, tiny_model

ROOT = Path(__file__).resolve().parents[5]

TOKENS = ["<unk>", "<s>", "</s>", "a", "b"] + ["t%d" % index for index in range(300)]
VOCAB = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", speculative.TOKENS_KEY: TOKENS,
         "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False, "tokenizer.ggml.bos_token_id": 1,
         "tokenizer.ggml.eos_token_id": 2}


def with_changes(**changes):
    changed = dict(VOCAB)
    for key, value in changes.items():
        name = speculative.TOKENS_KEY if key == "tokens" else "tokenizer.ggml." + key
        if value is None:
            changed.pop(name)
        else:
            changed[name] = value
    return changed


CASES = {
    "another tokenizer": (with_changes(model="llama"), "the draft's tokenizer is llama and the model's is gpt2"),
    "another BOS": (with_changes(bos_token_id=7), "their BOS tokens differ (1 in the model, 7 in the draft)"),
    "no BOS added": (with_changes(add_bos_token=False), "the model adds a BOS token and the draft does not"),
    "BOS left to the default": (with_changes(add_bos_token=None),
                                "the model says whether it adds a BOS token (tokenizer.ggml.add_bos_token) and the "
                                "draft leaves it to llama.cpp's default"),
    "too many more tokens": (with_changes(tokens=TOKENS + ["x%d" % index for index in range(129)]),
                             "the model has 305 tokens and the draft 434, more than 128 apart"),
    "one token's text": (with_changes(tokens=TOKENS[:9] + ["other"] + TOKENS[10:]),
                         "token 9 is 't4' in the model and 'other' in the draft"),
    "no token list": (with_changes(tokens=None), "the draft has no token list"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_draft_llama_server_would_refuse_is_named(case):
    draft, reason = CASES[case]
    assert speculative.vocab_problem(VOCAB, draft) == reason


def test_what_llama_server_accepts_passes():
    assert speculative.vocab_problem(VOCAB, dict(VOCAB)) is None
    # up to 128 tokens more, the first five (special) tokens' texts, and an EOS not added may differ
    assert speculative.vocab_problem(VOCAB, with_changes(tokens=TOKENS + ["x%d" % index for index in range(128)])) is None
    assert speculative.vocab_problem(VOCAB, with_changes(tokens=["?"] * 5 + TOKENS[5:])) is None
    assert speculative.vocab_problem(VOCAB, with_changes(eos_token_id=9)) is None


def test_the_kinds_are_llama_cpps_and_the_role_names_the_same():
    """The role keeps the kinds twice, where Jinja reads them: the argument spec's choices and the kinds that load a
    draft model (vars/main.yml). Both follow this module's lists."""
    assert set(speculative.DRAFT_MODEL_TYPES) | set(speculative.SELF_TYPES) | {"none"} == set(speculative.TYPES)
    assert not set(speculative.DRAFT_MODEL_TYPES) & set(speculative.SELF_TYPES)
    role = ROOT / "roles" / "rpc_master"
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert options["rpc_master_spec_type"]["choices"] == list(speculative.TYPES)
    assert yaml.safe_load((role / "vars" / "main.yml").read_text())["_rpc_master_spec_draft_kinds"] == list(
        speculative.DRAFT_MODEL_TYPES)


def test_files_read_with_their_tokens_whole(tmp_path):
    model = tiny_model.write_model(tmp_path / "model.gguf")
    draft = tiny_model.write_model(tmp_path / "draft.gguf", layers=1, seed=7)
    other = tiny_model.write_model(tmp_path / "other.gguf", vocab=400)
    read = {path.stem: gguf.read_header(path, whole_arrays=(speculative.TOKENS_KEY,))["metadata"]
            for path in (model, draft, other)}
    assert len(read["model"][speculative.TOKENS_KEY]) == 262
    assert speculative.vocab_problem(read["model"], read["draft"]) is None
    # neither says whether it adds EOS (llama.cpp's default for its tokenizer): their EOS must be the same, to be sure
    assert speculative.vocab_problem(read["model"], read["other"]) == "their EOS tokens differ (261 in the model, 399 in the draft)"
    # without whole_arrays the header reader keeps only the tokens' count
    assert gguf.read_header(model)["metadata"][speculative.TOKENS_KEY] == {"array_length": 262}


def test_each_kind_has_llama_cpps_own_rule_for_its_draft():
    """The vocabulary rule is draft-simple's alone (llama.cpp checks it in that kind only); EAGLE-3 takes an eagle3
    draft that names three layers of the model to extract; DFlash and DSpark a dflash draft."""
    foreign = with_changes(model="llama", tokens=["z"] * 500)
    eagle = dict(foreign, **{"general.architecture": "eagle3", "eagle3.target_layers": [2, 40, 77]})
    assert speculative.draft_problem("draft-simple", VOCAB, foreign) == "the draft's tokenizer is llama and the model's is gpt2"
    assert speculative.draft_problem("draft-eagle3", VOCAB, eagle) is None
    assert speculative.draft_problem("draft-eagle3", VOCAB, dict(eagle, **{"eagle3.target_layers": [2, 40]})) == \
        "the draft names 2 layers of the model to extract (eagle3.target_layers), and EAGLE-3 takes 3"
    assert speculative.draft_problem("draft-eagle3", VOCAB, dict(eagle, **{"eagle3.target_layers": {"array_length": 3}})) \
        is None, "an array the header reader kept as its count"
    assert speculative.draft_problem("draft-eagle3", VOCAB, dict(VOCAB, **{"general.architecture": "llama"})) == \
        "the draft is a llama model, and draft-eagle3 drafts with a draft of the eagle3 architecture made for the model"
    for kind in ("draft-dflash", "draft-dspark"):
        assert speculative.draft_problem(kind, VOCAB, dict(foreign, **{"general.architecture": "dflash"})) is None
        assert "drafts with a draft of the dflash architecture" in speculative.draft_problem(kind, VOCAB, dict(VOCAB, **{
            "general.architecture": "llama"}))


def test_draft_mtp_needs_the_models_own_prediction_layers():
    assert speculative.model_problem("draft-mtp", {"architecture": "qwen3", "nextn_layers": 0}) == (
        "the model has no multi-token-prediction layers (qwen3.nextn_predict_layers), which draft-mtp drafts with")
    assert speculative.model_problem("draft-mtp", {"architecture": "glm4moe", "nextn_layers": 1}) is None
    assert speculative.model_problem("ngram-simple", {"architecture": "qwen3", "nextn_layers": 0}) is None


def test_the_rules_are_the_pinned_llama_cpps():
    """Where llama.cpp decides each: only draft-simple's implementation calls the vocabulary check; eagle3.cpp refuses
    any number of extract layers but three; the architectures' names are llama-arch.cpp's."""
    source = llama_cpp.pinned_source_file("common/speculative.cpp")
    check = source.index("common_speculative_are_compatible(llama_get_model")
    simple = source.index("struct common_speculative_impl_draft_simple")
    assert simple < check < source.index("struct common_speculative_impl", simple + 10)
    assert source.count("common_speculative_are_compatible(") == 2, "declared once, called by draft-simple only"
    assert "target_layer_ids.size() != %d" % speculative.EAGLE3_EXTRACT_LAYERS in \
        llama_cpp.pinned_source_file("src/models/eagle3.cpp")
    arch = llama_cpp.pinned_source_file("src/llama-arch.cpp")
    for name in set(speculative.DRAFT_ARCHITECTURES.values()):
        assert '"%s"' % name in arch, name
    assert '"%s.target_layers"' in arch and '"%s.nextn_predict_layers"' in arch
