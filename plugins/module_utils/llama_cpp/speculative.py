# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speculative decoding in the pinned llama.cpp (common/speculative.cpp): its kinds, which of them load a draft model,
and each kind's own rule, read from the GGUF headers before anything is loaded: draft-simple's vocabulary check
(common_speculative_are_compatible, which only it applies), EAGLE-3's draft of three extract layers
(src/models/eagle3.cpp), DFlash's and DSpark's draft architecture, and draft-mtp's multi-token-prediction layers in the
model itself."""

from __future__ import annotations

# The kinds that load a draft model of their own (-md), and those that draft from the model itself (its
# multi-token-prediction heads) or from n-grams of the text, with no second model.
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
SELF_TYPES = ("draft-mtp", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
TYPES = ("none",) + DRAFT_MODEL_TYPES + SELF_TYPES

# llama.cpp's bounds (SPEC_VOCAB_MAX_SIZE_DIFFERENCE, SPEC_VOCAB_CHECK_START_TOKEN_ID): the sizes may differ by this
# many tokens, and every token from this id on that both have must be the same text.
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5

# The metadata the check reads: GGUF keeps the token texts as one array, which the header reader keeps whole for it.
TOKENS_KEY = "tokenizer.ggml.tokens"


# The draft architectures the kinds with a draft of their own load (llama-arch.cpp), and EAGLE-3's number of extract
# layers (its draft's <arch>.target_layers).
DRAFT_ARCHITECTURES = {"draft-eagle3": "eagle3", "draft-dflash": "dflash", "draft-dspark": "dflash"}
EAGLE3_EXTRACT_LAYERS = 3


def draft_problem(kind, model, draft, model_name="the model", draft_name="the draft"):
    """None when llama-server would draft with draft for model in speculative decoding of this kind (one of
    DRAFT_MODEL_TYPES), else why not (one sentence). model and draft: the headers' metadata (the token texts whole)."""
    if kind == "draft-simple":
        return vocab_problem(model, draft, model_name, draft_name)
    architecture = draft.get("general.architecture")
    wanted = DRAFT_ARCHITECTURES.get(kind)
    if wanted and architecture != wanted:
        return "%s is a %s model, and %s drafts with a draft of the %s architecture made for the model" % (
            draft_name, architecture, kind, wanted)
    if kind == "draft-eagle3":
        layers = draft.get("%s.target_layers" % architecture)
        if isinstance(layers, dict):  # an array the header reader did not keep whole
            count = layers.get("array_length", 0)
        else:
            count = len(layers) if isinstance(layers, list) else 0
        if count != EAGLE3_EXTRACT_LAYERS:
            return "%s names %d layers of the model to extract (%s.target_layers), and EAGLE-3 takes %d" % (
                draft_name, count, architecture, EAGLE3_EXTRACT_LAYERS)
    return None


def model_problem(kind, shape, model_name="the model"):
    """None when the model itself can draft for this kind, else why not: draft-mtp drafts with the model's own
    multi-token-prediction layers (<arch>.nextn_predict_layers; model_arch.shape's nextn_layers)."""
    if kind == "draft-mtp" and not shape.get("nextn_layers"):
        return ("%s has no multi-token-prediction layers (%s.nextn_predict_layers), which draft-mtp drafts with"
                % (model_name, shape.get("architecture")))
    return None


def vocab_problem(model, draft, model_name="the model", draft_name="the draft"):
    """None when llama-server would accept draft's vocabulary beside model's, else why not (one sentence). model and
    draft are the headers' metadata, each with its token texts whole (TOKENS_KEY). A file that leaves adding BOS or
    EOS to llama.cpp's default (which follows from its tokenizer) must be paired with one that does too, and their BOS or
    EOS must then be the same (to be sure: llama.cpp compares them when its default adds the token)."""
    kind, draft_kind = model.get("tokenizer.ggml.model"), draft.get("tokenizer.ggml.model")
    if kind != draft_kind:
        return "%s's tokenizer is %s and %s's is %s" % (draft_name, draft_kind, model_name, kind)
    for special in ("bos", "eos"):
        add_key, id_key = "tokenizer.ggml.add_%s_token" % special, "tokenizer.ggml.%s_token_id" % special
        add, draft_add = model.get(add_key), draft.get(add_key)
        if (add is None) != (draft_add is None):
            # llama.cpp's default for the one left out depends on its tokenizer: only the same declaration is sure
            return ("%s says whether it adds a %s token (%s) and %s leaves it to llama.cpp's default" % (
                draft_name if add is None else model_name, special.upper(), add_key,
                model_name if add is None else draft_name))
        if add is not None and bool(add) != bool(draft_add):
            return "%s %s a %s token and %s %s" % (model_name, "adds" if add else "adds no", special.upper(), draft_name,
                                                   "does" if draft_add else "does not")
        if (add is None or add) and model.get(id_key) != draft.get(id_key):
            return "their %s tokens differ (%s in %s, %s in %s)" % (
                special.upper(), model.get(id_key), model_name, draft.get(id_key), draft_name)
    tokens, draft_tokens = model.get(TOKENS_KEY), draft.get(TOKENS_KEY)
    if not isinstance(tokens, list) or not isinstance(draft_tokens, list):
        return "%s has no token list" % (model_name if not isinstance(tokens, list) else draft_name)
    if abs(len(tokens) - len(draft_tokens)) > VOCAB_MAX_SIZE_DIFFERENCE:
        return "%s has %d tokens and %s %d, more than %d apart" % (
            model_name, len(tokens), draft_name, len(draft_tokens), VOCAB_MAX_SIZE_DIFFERENCE)
    for index in range(VOCAB_CHECK_START_TOKEN_ID, min(len(tokens), len(draft_tokens))):
        if tokens[index] != draft_tokens[index]:
            return "token %d is %r in %s and %r in %s" % (index, tokens[index], model_name, draft_tokens[index], draft_name)
    return None
