"""Token-exact multi-turn sequences (ragen.agent.context) for several chat templates.

The invariant under test: the ids a sample trains on are exactly the ids the policy
sampled, interleaved with tokenized template text; the masks sit exactly on the sampled
ids; and for append-only templates ``decode(ids)`` equals the template's own rendering.
"""

from __future__ import annotations

import copy

import pytest
from fakes import (
    COUNTING_TEMPLATE,
    HAND_TEMPLATE,
    NO_SYSTEM_TEMPLATE,
    THINK_DROPPING_TEMPLATE,
    tiny_tokenizer,
)

from ragen.agent.context import (
    PLAIN_CHAT_TEMPLATE,
    ChatFormat,
    ContextManager,
    probe_append_only,
)

RESPONSES = [
    "<think>the goal is right</think><answer>right</answer>",
    "<think>hmm, 3 + 4 = 7 ü</think><answer>left || right</answer>",
    "no tags at all",
]


def _formats():
    chatml, llama3 = tiny_tokenizer("chatml"), tiny_tokenizer("llama3")
    hand_eos = chatml.convert_tokens_to_ids("<|endoftext|>")  # the hand template's end of turn
    return {
        "chatml": ChatFormat(chatml),
        "llama3": ChatFormat(llama3),
        "hand": ChatFormat(chatml, chat_template=HAND_TEMPLATE, eos_ids=[hand_eos]),
    }


def _eos_id(fmt: ChatFormat) -> int:
    """The end-of-turn id the template itself writes after an assistant message."""
    if fmt.chat_template == HAND_TEMPLATE:
        return fmt.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return fmt.tokenizer.eos_token_id


def _play(fmt: ChatFormat, n_turns: int = 3, eos: bool = True, window=None):
    """Drive a ContextManager by hand; return it, the prompts and the sampled ids."""
    tok = fmt.tokenizer
    ctx = ContextManager(fmt, "SYSTEM rules: reach G.", window=window)
    prompts, sampled, users = [], [], []
    for t in range(n_turns):
        user = f"Turn {t + 1}:\nState:\nP__G\nYou have {9 - t} actions left."
        users.append(user)
        prompts.append(ctx.next_prompt(user))
        ids = tok.encode(RESPONSES[t % len(RESPONSES)], add_special_tokens=False)
        if eos and t % 2 == 0:  # alternate: ended by EOS / stopped at </answer>
            ids = ids + [_eos_id(fmt)]
        sampled.append(ids)
        ctx.add_response(ids, [-0.5 - k for k in range(len(ids))], ended_by_eos=eos and t % 2 == 0)
    return ctx, prompts, sampled, users


def _messages(fmt, users, sampled, upto):
    """The conversation text-wise: system, then (user, assistant content) pairs."""
    msgs = [{"role": "system", "content": "SYSTEM rules: reach G."}]
    for u, ids in list(zip(users, sampled))[:upto]:
        body = ids[:-1] if ids and ids[-1] in fmt.eos_ids else ids
        msgs += [
            {"role": "user", "content": u},
            {"role": "assistant", "content": fmt.decode(body)},
        ]
    return msgs


@pytest.mark.parametrize("name", ["chatml", "llama3", "hand"])
def test_full_history_is_token_exact(name):
    fmt = _formats()[name]
    assert fmt.strategy == "delta"
    ctx, prompts, sampled, users = _play(fmt)
    (s,) = ctx.samples()
    ids, mask = s.input_ids, s.response_mask

    # 1. decode(all ids) == the template's own rendering of the conversation
    msgs = _messages(fmt, users, sampled, 3)
    last_prompt = msgs[:-1]  # up to the last user message
    rendered = fmt.render(last_prompt, add_generation_prompt=True) + fmt.decode(sampled[-1])
    assert fmt.decode(ids) == rendered
    assert s.exact

    # 2. each prompt the policy saw is a prefix; the sampled ids follow it verbatim
    for t, (prompt, got) in enumerate(zip(prompts, sampled)):
        assert ids[: len(prompt)] == prompt
        assert ids[len(prompt) : len(prompt) + len(got)] == got
        assert fmt.decode(prompt) == fmt.render(
            _messages(fmt, users, sampled, t) + [{"role": "user", "content": users[t]}], True
        )
        # 3. mask exactly on the sampled ids; turn end = last sampled position
        assert mask[len(prompt) : len(prompt) + len(got)] == [1] * len(got)
        assert s.turn_ends[t] == len(prompt) + len(got) - 1
        assert s.gen_logprobs[len(prompt) : len(prompt) + len(got)] == [
            -0.5 - k for k in range(len(got))
        ]
    assert sum(mask) == sum(len(x) for x in sampled)
    assert len(ids) == len(mask) == len(s.gen_logprobs)
    assert ids[-1] == sampled[-1][-1]  # the sample ends on the last sampled id


def test_eos_tail_is_not_duplicated():
    fmt = _formats()["chatml"]
    ctx, prompts, sampled, _ = _play(fmt, n_turns=2, eos=True)
    (s,) = ctx.samples()
    text = fmt.decode(s.input_ids)
    # turn 0 ended with a sampled <|im_end|>; the template's own <|im_end|> is not added again
    assert "</answer><|im_end|>\n<|im_start|>user" in text
    assert "<|im_end|><|im_end|>" not in text


def test_probe_classifies_templates():
    tok = tiny_tokenizer("chatml")
    assert probe_append_only(ChatFormat(tok, chat_template=HAND_TEMPLATE))
    assert probe_append_only(ChatFormat(tok, chat_template=PLAIN_CHAT_TEMPLATE))
    for template in (THINK_DROPPING_TEMPLATE, COUNTING_TEMPLATE):
        fmt = ChatFormat(tok, chat_template=template)
        assert not probe_append_only(fmt)
        assert fmt.strategy == "fixed_prefix"
    with pytest.raises(ValueError, match="strategy"):
        ChatFormat(tok, strategy="guess")


@pytest.mark.parametrize("template", [THINK_DROPPING_TEMPLATE, COUNTING_TEMPLATE])
def test_non_append_only_template_uses_fixed_prefix_glue(template):
    fmt = ChatFormat(tiny_tokenizer("chatml"), chat_template=template)
    ctx, prompts, sampled, users = _play(fmt, eos=False)
    (s,) = ctx.samples()
    ids = s.input_ids
    assert not s.exact  # by construction the sequence differs from the template's rendering
    for t, (prompt, got) in enumerate(zip(prompts, sampled)):
        assert ids[: len(prompt)] == prompt  # what the policy saw == what is trained on
        assert ids[len(prompt) : len(prompt) + len(got)] == got
        if t > 0:  # the glue is the fixed-prefix rendering of the user turn
            start = len(prompts[t - 1]) + len(sampled[t - 1])
            glue = fmt.fixed_prefix_glue("SYSTEM rules: reach G.", users[t])
            assert fmt.decode(ids[start : len(prompt)]) == glue
    text = fmt.decode(ids)
    assert "the goal is right" in text  # earlier reasoning is kept, not dropped
    assert text.count("<|im_start|>assistant\n") == 3
    assert fmt.decode(ids) == fmt.decode(prompts[-1]) + fmt.decode(sampled[-1])


def test_forced_strategies_agree_on_append_only_template():
    tok = tiny_tokenizer("chatml")
    a = _play(ChatFormat(tok, strategy="delta"), eos=False)[0].samples()[0]
    b = _play(ChatFormat(tok, strategy="fixed_prefix"), eos=False)[0].samples()[0]
    assert a.input_ids == b.input_ids and a.response_mask == b.response_mask


def test_llama3_trimmed_content_falls_back_per_episode():
    """llama3 trims message content: a response with leading whitespace breaks append-only."""
    fmt = ChatFormat(tiny_tokenizer("llama3"))
    tok = fmt.tokenizer
    ctx = ContextManager(fmt, "sys")
    p0 = ctx.next_prompt("Turn 1")
    r0 = tok.encode("  <think>x</think><answer>left</answer>\n", add_special_tokens=False)
    ctx.add_response(r0)
    p1 = ctx.next_prompt("Turn 2")
    r1 = tok.encode("<answer>right</answer>", add_special_tokens=False)
    ctx.add_response(r1)
    (s,) = ctx.samples()
    assert ctx.num_fallbacks == 1 and not s.exact
    assert s.input_ids[: len(p1)] == p1 and s.input_ids[len(p0) : len(p0) + len(r0)] == r0
    assert s.input_ids[len(p1) :] == r1
    assert fmt.decode(p1).endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_foreign_eos_is_kept_and_sequence_stays_consistent():
    """A sampled EOS that is not the template's end-of-turn (<|endoftext|> in chatml)."""
    fmt = ChatFormat(tiny_tokenizer("chatml"))
    tok = fmt.tokenizer
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ctx = ContextManager(fmt, "sys")
    p0 = ctx.next_prompt("Turn 1")
    r0 = tok.encode("<answer>left</answer>", add_special_tokens=False) + [eot]
    ctx.add_response(r0, ended_by_eos=True)
    p1 = ctx.next_prompt("Turn 2")
    assert p1[len(p0) : len(p0) + len(r0)] == r0
    assert "</answer><|endoftext|><|im_end|>\n<|im_start|>user\nTurn 2" in fmt.decode(p1)


def test_system_role_folded_into_user_when_template_rejects_it():
    fmt = ChatFormat(tiny_tokenizer("chatml"), chat_template=NO_SYSTEM_TEMPLATE)
    assert fmt.system_in_user
    ctx = ContextManager(fmt, "RULES")
    text = fmt.decode(ctx.next_prompt("Turn 1"))
    assert text == "<|im_start|>user\nRULES\n\nTurn 1<|im_end|>\n<|im_start|>assistant\n"


def test_tokenizer_without_template_uses_plain_template():
    tok = copy.deepcopy(tiny_tokenizer("chatml"))
    tok.chat_template = None
    fmt = ChatFormat(tok)
    assert fmt.chat_template == PLAIN_CHAT_TEMPLATE and fmt.strategy == "delta"
    ctx, *_ = _play(fmt, n_turns=2, eos=False)
    text = fmt.decode(ctx.samples()[0].input_ids)
    assert text.startswith("System: SYSTEM rules") and "\n\nAssistant: <think>" in text


def test_window_context_one_sample_per_turn():
    fmt = _formats()["chatml"]
    ctx, prompts, sampled, users = _play(fmt, n_turns=3, window=1)
    samples = ctx.samples()
    assert [s.turn_index for s in samples] == [0, 1, 2]
    for t, s in enumerate(samples):
        assert s.input_ids == prompts[t] + sampled[t]
        assert s.response_mask == [0] * len(prompts[t]) + [1] * len(sampled[t])
        assert s.turn_ends == [len(s.input_ids) - 1]
        assert s.exact
        # prompt = system + the previous turn only + this user message
        window = _messages(fmt, users, sampled, t)[1:][-2:]
        expected = fmt.render(
            [{"role": "system", "content": "SYSTEM rules: reach G."}, *window,
             {"role": "user", "content": users[t]}],
            True,
        )  # fmt: skip
        assert fmt.decode(prompts[t]) == expected
        # the previous turn's sampled ids appear verbatim inside the window prompt
        if t:
            assert _contains(prompts[t], sampled[t - 1])
    # window 0: every prompt is just system + the current user message
    ctx0, prompts0, *_ = _play(fmt, n_turns=2, window=0)
    assert prompts0[1] == ContextManager(fmt, "SYSTEM rules: reach G.").next_prompt(
        "Turn 2:\nState:\nP__G\nYou have 8 actions left."
    )


def _contains(haystack, needle):
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def test_cancel_prompt_restores_the_sequence():
    fmt = _formats()["chatml"]
    ctx = ContextManager(fmt, "sys")
    ctx.next_prompt("Turn 1")
    r = fmt.encode("<answer>left</answer>")
    ctx.add_response(r)
    before = ctx.samples()[0].input_ids
    ctx.next_prompt("Turn 2 " * 50)
    ctx.cancel_prompt()
    (s,) = ctx.samples()
    assert s.input_ids == before and s.input_ids[-len(r) :] == r
    with pytest.raises(RuntimeError, match="no open prompt"):
        ctx.add_response(r)
    with pytest.raises(ValueError, match="window"):
        ContextManager(fmt, "sys", window=-1)


# --------------------------------------------------------------------------- turn-close ids

CLOSE_TEXT = {  # what each template writes after an assistant message
    "chatml": "<|im_end|>\n",
    "llama3": "<|eot_id|>",
    "hand": "<|endoftext|>\n\n",
    "plain": "\n\n",
    "think_dropping": "<|im_end|>\n",
    "counting": "<|im_end|>\n",
    "no_system": "<|im_end|>\n",
}


def _close_formats():
    formats = _formats()
    chatml = tiny_tokenizer("chatml")
    plain = copy.deepcopy(chatml)
    plain.chat_template = None
    formats["plain"] = ChatFormat(plain)
    formats["think_dropping"] = ChatFormat(chatml, chat_template=THINK_DROPPING_TEMPLATE)
    formats["counting"] = ChatFormat(chatml, chat_template=COUNTING_TEMPLATE)
    formats["no_system"] = ChatFormat(chatml, chat_template=NO_SYSTEM_TEMPLATE)
    return formats


def _runs(mask):
    """(start, end) of each maximal run of ones."""
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


@pytest.mark.parametrize("name", list(CLOSE_TEXT))
@pytest.mark.parametrize("eos", [True, False])
def test_turn_close_mask_covers_exactly_the_end_of_turn_text(name, eos):
    fmt = _close_formats()[name]
    assert fmt.turn_close == CLOSE_TEXT[name]
    ctx, prompts, sampled, users = _play(fmt, n_turns=4, eos=eos)
    (s,) = ctx.samples()
    ids, close = s.input_ids, s.turn_close_mask
    assert len(close) == len(ids)
    assert not any(c and m for c, m in zip(close, s.response_mask))  # never a sampled id
    runs = _runs(close)
    k = 0
    for t in range(3):  # the last turn is followed by no glue
        ended_by_eos = sampled[t][-1] in fmt.eos_ids
        expected = fmt.turn_close
        if ended_by_eos and expected.startswith(fmt.decode(sampled[t][-1:])):
            expected = expected[len(fmt.decode(sampled[t][-1:])) :]  # the EOS closed it
        if not expected:  # e.g. llama3: a sampled <|eot_id|> is the whole end of turn
            continue
        start, end = runs[k]
        k += 1
        assert start == s.turn_ends[t] + 1  # right after the turn's last sampled id
        assert fmt.decode(ids[start:end]) == expected  # exactly the end-of-turn text
        # the next user message follows the closing ids
        assert users[t + 1] in fmt.decode(ids[end : len(prompts[t + 1])])
        assert users[t + 1] not in fmt.decode(ids[start:end])
    assert k == len(runs)  # nothing else is marked
    if name == "chatml" and eos:  # turns 0 and 2 sampled <|im_end|>: only "\n" is left
        assert [fmt.decode(ids[a:b]) for a, b in runs] == ["\n", "<|im_end|>\n", "\n"]


def test_turn_close_mask_after_a_foreign_eos_and_after_cancel():
    fmt = ChatFormat(tiny_tokenizer("chatml"))
    tok = fmt.tokenizer
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ctx = ContextManager(fmt, "sys")
    ctx.next_prompt("Turn 1")
    r0 = tok.encode("<answer>left</answer>", add_special_tokens=False) + [eot]
    ctx.add_response(r0, ended_by_eos=True)
    before = ctx.samples()[0]
    assert before.turn_close_mask == [0] * len(before.input_ids)
    ctx.next_prompt("Turn 2 " * 5)
    ctx.cancel_prompt()  # restores the mask with the ids
    assert ctx.samples()[0].turn_close_mask == before.turn_close_mask
    ctx.next_prompt("Turn 2")
    ctx.add_response(fmt.encode("<answer>right</answer>"))
    (s,) = ctx.samples()
    (start, end), = _runs(s.turn_close_mask)  # fmt: skip
    # <|endoftext|> is not the template's end of turn: the whole <|im_end|>\n follows it
    assert start == s.turn_ends[0] + 1 and s.input_ids[start - 1] == eot
    assert fmt.decode(s.input_ids[start:end]) == "<|im_end|>\n"


def test_turn_close_mask_of_window_samples_and_trajectories():
    from ragen.agent.rollout import _trajectory

    fmt = _formats()["chatml"]
    ctx, *_ = _play(fmt, n_turns=3, window=1)
    for s in ctx.samples():  # context turns are prompt; the trained turn ends the sample
        assert s.turn_close_mask == [0] * len(s.input_ids)
    ctx, *_ = _play(fmt, n_turns=3)
    (s,) = ctx.samples()
    tr = _trajectory(s, [0.0, 0.0, 1.0], {})
    assert tr.turn_close_mask == s.turn_close_mask and sum(tr.turn_close_mask) > 0
    assert "turn_close_mask" not in tr.to_json()
    assert tr.to_json(with_ids=True)["turn_close_mask"] == s.turn_close_mask


def test_masked_gae_over_response_and_turn_close_ids():
    """M_adv = response | turn_close on a real sample: the closing ids' values join the
    recursion, which changes the advantages of exactly the turns they close."""
    import torch

    from ragen.algo import compute_gae, compute_masked_gae

    fmt = _formats()["chatml"]
    ctx, *_ = _play(fmt, n_turns=3, eos=False)
    (s,) = ctx.samples()
    response = torch.tensor([s.response_mask])
    close = torch.tensor([s.turn_close_mask])
    assert close.sum() == 2 * 2  # "<|im_end|>" and "\n" after turns 0 and 1
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(response.shape, generator=gen, dtype=torch.float64)
    rewards = torch.zeros(response.shape, dtype=torch.float64)
    rewards[0, s.turn_ends] = torch.tensor([0.1, -0.2, 1.0], dtype=torch.float64)
    adv_mask = response | close

    def masked(v):
        return compute_masked_gae(rewards, v, response, 0.95, 0.9, advantage_mask=adv_mask)

    adv, ret = masked(values)
    plain, _ = compute_gae(rewards, values, response, 0.95, 0.9)
    # by definition: GAE over M_adv, advantages kept on the response ids only
    expected = compute_gae(rewards, values, adv_mask, 0.95, 0.9)[0] * response
    torch.testing.assert_close(adv, expected)
    assert (adv[response == 0] == 0).all()  # closing ids and prompts get no advantage
    assert (ret[close == 1] != 0).all()  # ...but value targets
    turn_of = torch.zeros(response.shape, dtype=torch.long)
    for end in s.turn_ends[:-1]:
        turn_of[0, end + 1 :] += 1
    changed = adv != plain
    for t in range(3):
        in_turn = (turn_of == t) & (response == 1)
        if t < 2:  # followed by closing ids: every advantage of the turn moves
            assert changed[in_turn].all()
        else:  # the last turn is followed by nothing: unchanged
            assert not changed[in_turn].any()
    # the values at the closing ids are what moved them
    v2 = values.clone()
    v2[close == 1] += 1.0
    adv2, _ = masked(v2)
    assert (adv2 != adv)[(turn_of < 2) & (response == 1)].all()
    torch.testing.assert_close(adv2[turn_of == 2], adv[turn_of == 2])
    torch.testing.assert_close(compute_gae(rewards, v2, response, 0.95, 0.9)[0], plain)


def test_template_that_cannot_end_on_an_assistant_message_marks_nothing():
    template = (
        "{% if messages[-1]['role'] == 'assistant' %}{{ raise_exception('no prefill') }}"
        "{% endif %}" + NO_SYSTEM_TEMPLATE.replace("{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}", "")
    )  # fmt: skip
    fmt = ChatFormat(tiny_tokenizer("chatml"), chat_template=template)
    assert fmt.turn_close == ""
    ctx, *_ = _play(fmt, n_turns=2, eos=False)
    (s,) = ctx.samples()
    assert s.exact and s.turn_close_mask == [0] * len(s.input_ids)
