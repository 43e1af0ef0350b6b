# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speculative decoding in the pinned llama.cpp (common/speculative.cpp): its kinds, which of them load a draft model,
and whether a draft's vocabulary is one llama-server accepts beside the model (common_speculative_are_compatible),
read from the two GGUF headers before anything is loaded."""

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
