"""The K/V cache keyword: the installed transformers' name, read from the forward."""

import warnings

import torch

from ragen.models.kv_cache import NEW, OLD, cache_arg, cache_keyword, returned_cache


class _OldForward(torch.nn.Module):
    def forward(self, input_ids=None, past_key_values=None, **kwargs):
        return past_key_values


class _Wrapper(torch.nn.Module):  # declares neither name, like PEFT's model classes
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def get_base_model(self):
        return self.inner


def test_the_keyword_is_the_one_the_forward_declares(tiny_model_dir):
    from ragen.models import load_policy

    model, _ = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    # the pinned transformers (>= 5.24) names it `cache`; older releases do not
    assert cache_keyword(model) == NEW and cache_keyword(model.model) == NEW
    assert cache_keyword(_OldForward()) == OLD
    assert cache_arg(_Wrapper(_OldForward()), "kv") == {OLD: "kv"}
    assert cache_keyword(_Wrapper(model)) == NEW


def test_a_shared_prefix_forward_warns_of_no_deprecated_keyword(tiny_model_dir):
    from ragen.models import load_policy
    from ragen.models.logprobs import sequence_logprobs

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    ids = torch.randint(5, len(tok), (3, 40), generator=torch.Generator().manual_seed(0))
    ids[:, :20] = ids[0, :20]  # a shared prefix, and two rows sharing a prompt
    ids[2, :30] = ids[1, :30]
    positions = torch.zeros_like(ids)
    positions[:, 32:] = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lp, _ = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0, positions)
    assert not [w for w in caught if OLD in str(w.message)]
    full, _ = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0, positions, dedupe=False,
                                share_prefix=False)  # fmt: skip
    torch.testing.assert_close(lp, full, atol=1e-5, rtol=1e-5)


def test_returned_cache_reads_either_field():
    class Out:
        cache = None
        past_key_values = "old"

    assert returned_cache(Out()) == "old"
    Out.cache = "new"
    assert returned_cache(Out()) == "new"
