"""Greedy decoding under a GBNF grammar that checks the model's best token before masking the vocabulary.

llama.cpp's grammar sampler, as llama-cpp-python chains it, tests every token of the vocabulary
against the grammar before each sampled token: 152k tokens for the Qwen2.5 models, 30 to 150 ms
a token on a small CPU, as long as or longer than the 0.5B model's own decoding step. Under greedy
decoding only the best allowed token matters, and the best token of all is usually allowed (the
model writes what the grammar asks for), so this processor tests that one token first and masks
the whole vocabulary only when it is refused, as llama.cpp's own `common_sampler` does.

The chosen token is the same either way: greedy takes the first token with the highest logit;
if that token is allowed, no allowed token can rank before it; if it is refused, the vocabulary
is masked exactly as the grammar sampler would, and greedy picks among what is left. Whether a
token is allowed does not depend on the other candidates (llama.cpp tests each against the
grammar's stacks on its own). Only for greedy decoding: sampling with a temperature draws from
the masked distribution, so it keeps the grammar in llama.cpp's chain.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
import numpy.typing as npt


class GreedyGrammar:
    """A llama-cpp-python logits processor that applies a GBNF grammar to greedy decoding.

    Pass it as `logits_processor` with `grammar=None`, temperature 0 and no repeat penalty (the
    grammar path's settings), and close it when the generation ends.
    """

    def __init__(self, llama: Any, grammar: str, prompt_tokens: int) -> None:
        import llama_cpp

        self._lib = llama_cpp
        sampler = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar")
        self._sampler: Any = sampler
        self._seen = prompt_tokens  # tokens before this are the prompt, not generated
        self._one: Any = (llama_cpp.llama_token_data * 1)()
        self._full: Any = None
        self.checked = 0
        """Tokens whose check alone decided (the best token was allowed)."""
        self.masked = 0
        """Tokens for which the whole vocabulary was masked (the best token was refused)."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        lib = self._lib
        # The tokens generated since the last call have been evaluated; the grammar follows them.
        for token in input_ids[self._seen :]:
            lib.llama_sampler_accept(self._sampler, int(token))
        self._seen = len(input_ids)
        best = int(np.argmax(scores))
        self._one[0].id, self._one[0].logit, self._one[0].p = best, float(scores[best]), 0.0
        one = lib.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
        lib.llama_sampler_apply(self._sampler, ctypes.byref(one))
        if self._one[0].logit != -math.inf:
            self.checked += 1
            return scores
        self.masked += 1
        n = len(scores)
        if self._full is None or len(self._full) != n:
            self._full = (lib.llama_token_data * n)()
        view = np.ctypeslib.as_array(self._full)
        view["id"] = np.arange(n, dtype=np.int32)
        view["logit"] = scores
        view["p"] = 0.0
        full = lib.llama_token_data_array(data=self._full, size=n, selected=-1, sorted=False)
        lib.llama_sampler_apply(self._sampler, ctypes.byref(full))
        masked = np.empty_like(scores)
        masked[view["id"]] = view["logit"]
        return masked

    def close(self) -> None:
        """Free llama.cpp's grammar state."""
        if self._sampler is not None:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None
