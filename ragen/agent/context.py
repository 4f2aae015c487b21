"""Token-exact multi-turn sequences for any tokenizer with a chat template.

The policy's sampled ids are never decoded and re-tokenized. A sequence is built
from two kinds of segments::

    [ prompt_0 | sampled_0 | glue_1 | sampled_1 | glue_2 | ... ]

* ``sampled_t``: the ids the policy produced in turn t, kept verbatim (loss mask 1);
* ``prompt_0``/``glue_t``: template text (system + user messages, end-of-turn markers,
  the next generation prompt), tokenized from text (loss mask 0).

How the glue text is found
--------------------------
**delta** (used when the template is append-only, the usual case). Render the whole
conversation so far with ``add_generation_prompt=True`` and take the text after
everything already in the sequence. This needs ``render(conversation + new user)``
to *start with* the text of our ids so far (``decode(ids)``); that is checked every
turn. When it holds for every turn, ``decode(input_ids)`` equals the template's own
rendering of the conversation (plus the last sampled text), byte for byte.

**fixed_prefix** (the fallback). Some templates are not append-only: they trim or
rewrite earlier assistant messages (e.g. drop earlier ``<think>`` content), or inject
text that depends on the number of messages. Then the glue after turn t is taken from
a fixed dummy conversation::

    render([system, user: DUMMY, assistant: MARK, user: u_{t+1}], add_generation_prompt=True)

and the glue is everything after ``MARK``. The sequence then holds the full sampled
history (nothing dropped or rewritten) joined by the template's own end-of-turn and
user-turn text; the ids are still exactly what the policy was prompted with, since
rollout and training use the same ids. An episode switches to ``fixed_prefix`` the
first time the append-only check fails (counted in rollout stats); a template that
fails the check at construction (:func:`probe_append_only`) uses it from the start.

End-of-sequence tail: when the last sampled id is an EOS token (e.g. ``<|im_end|>``),
its text usually opens the template's end-of-turn glue; that prefix of the glue is
dropped so the EOS is not duplicated. The EOS id itself stays (it was sampled). An EOS
the template never writes at a turn's end (``<|endoftext|>`` under ChatML) stays too,
followed by the template's whole glue; the delta check then compares the rendering with
the sequence's text *without* such sampled EOS tails (``_Sequence.rendered``), so the
episode stays on ``delta`` and exact: its ids are the template's rendering plus the EOS
ids the policy sampled, which is what a sample must hold. (Before, one such reply
switched the episode to ``fixed_prefix`` and marked it inexact: random tiny models,
which end a turn with ``<|endoftext|>`` now and then, showed 1-2 ``context_inexact``
episodes of 16 per step.)

Turn-close tokens: the glue after a response begins with the template's end-of-turn
text, ``ChatFormat.turn_close`` (what the template writes after an assistant message:
``<|im_end|>\n`` for ChatML, ``<|eot_id|>`` for Llama 3; found by rendering
``[system, user, assistant: MARK]`` without a generation prompt and taking what
follows MARK). Generation stops at ``</answer>``, so these ids are not sampled, but
they close the action. ``SampleIds.turn_close_mask`` is 1 on the glue ids that cover
that text after each trainable response (the part a sampled EOS did not already
provide: after a sampled ``<|im_end|>`` only the ``\n`` is left), for estimators that
let them join the advantage recursion (``masked_gae``'s M_adv). Only ids lying wholly
inside the end-of-turn text are marked, so a sampled id or the next user message never
is. The last response of a sample is followed by no glue, hence by no turn-close ids.

Context policy: ``window=None`` keeps the full history in one sample; ``window=k``
prompts each turn with the system message, the last k turns and the new user
message, and makes every turn its own sample (:meth:`ContextManager.samples`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ragen.errors import ConfigError, UsageError

# A plain template for tokenizers that ship none (base models). Append-only by design.
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)

TEMPLATE_STRATEGIES = ("auto", "delta", "fixed_prefix")  # ChatFormat(strategy=...)

_DUMMY_USER = "ragen-context-probe: user"
_MARK = "RAGEN_ASSISTANT_MARK_7F3A"


class ChatFormat:
    """A tokenizer plus its chat template: render, encode, decode, glue text.

    ``strategy``: ``"auto"`` (probe the template: ``delta`` when append-only, else
    ``fixed_prefix``), ``"delta"`` or ``"fixed_prefix"``.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        strategy: str = "auto",
        eos_ids: list[int] | None = None,
    ) -> None:
        if strategy not in TEMPLATE_STRATEGIES:
            raise ConfigError(f"strategy must be auto, delta or fixed_prefix, got {strategy!r}")
        self.tokenizer = tokenizer
        template = chat_template or getattr(tokenizer, "chat_template", None)
        if isinstance(template, dict):  # named templates (older hubs): use the default one
            template = template.get("default") or next(iter(template.values()), None)
        self.chat_template = template or PLAIN_CHAT_TEMPLATE
        # The Rust tokenizer behind a "fast" HF tokenizer: same ids/text, without the
        # wrapper's per-call overhead (which dominates for short glue strings).
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self.eos_ids = set(eos_ids or [])
        if getattr(tokenizer, "eos_token_id", None) is not None:
            self.eos_ids.add(int(tokenizer.eos_token_id))
        self._openings: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {}
        self.system_in_user = self._detect_system_in_user()
        self.turn_close = self._detect_turn_close()
        if strategy == "auto":
            strategy = "delta" if probe_append_only(self) else "fixed_prefix"
        self.strategy = strategy

    # -- primitives -------------------------------------------------------------------
    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        """Chat-template text of ``messages`` (system folded into the first user if needed)."""
        if self.system_in_user and messages and messages[0]["role"] == "system":
            system, rest = messages[0]["content"], list(messages[1:])
            if rest:
                rest[0] = {"role": rest[0]["role"], "content": f"{system}\n\n{rest[0]['content']}"}
            messages = rest
        return self.tokenizer.apply_chat_template(
            messages,
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    #: most conversation openings :meth:`opening` keeps (then it starts afresh)
    OPENINGS_KEPT = 65536

    def opening(self, system: str, user: str) -> tuple[str, tuple[int, ...]]:
        """Text and ids of ``[system, user]`` with the generation prompt: every prompt of
        a rollout that shows the current state alone (``rollout.context_window=0``).

        Memoized by ``(system, user)``: the same state seen again (a group's episodes at
        their first turn, a state revisited) costs a dict lookup instead of a template
        render and an encode. The value is what render + encode give, so nothing changes.
        """
        key = (system, user)
        hit = self._openings.get(key)
        if hit is None:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            text = self.render(messages, add_generation_prompt=True)
            if len(self._openings) >= self.OPENINGS_KEPT:
                self._openings.clear()
            hit = self._openings[key] = (text, tuple(self.encode(text)))
        return hit

    def encode(self, text: str) -> list[int]:
        # Template text carries its own BOS/special tokens; add none (as HF chat does).
        if not text:
            return []
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_with_images(self, text: str, images: list) -> list[int]:
        """Ids of template text holding image placeholders; a text-only format has none
        (``ragen.agent.visual_context.VisionChatFormat`` implements it)."""
        raise ConfigError(
            "the environment observes through pictures but the model is text-only. Fix: use "
            "a vision-language model (e.g. `ragen models create-tiny-vlm --out DIR`), or "
            "the text version of the env (e.g. sokoban instead of sokoban_visual)"
        )

    def decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def fixed_prefix_glue(self, system: str, user: str) -> str:
        """Glue text after an assistant message and up to the next generation, for ``user``.

        Rendered against a fixed dummy prefix, so it does not depend on the history.
        """
        text = self.render(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": _DUMMY_USER},
                {"role": "assistant", "content": _MARK},
                {"role": "user", "content": user},
            ],
            add_generation_prompt=True,
        )
        if text.count(_MARK) != 1:
            raise UsageError(
                "the chat template does not render assistant content verbatim; "
                "pass chat_template= with a template that does"
            )
        return text.split(_MARK, 1)[1]

    def turn_close_ids(self, glue: str, ids: list[int], tail: str) -> int:
        """How many leading ``ids`` (the encoding of ``glue``, which follows a response
        ending with the sampled text ``tail``) lie wholly inside the end-of-turn text.

        The end-of-turn text still to come is ``turn_close`` minus the part the sampled
        EOS ``tail`` already wrote; only as much of it as ``glue`` really starts with
        counts (a template that renders its last assistant message differently from an
        earlier one cannot make the mask reach beyond the common prefix).
        """
        close = self.turn_close
        if tail and close.startswith(tail):
            close = close[len(tail) :]
        n_chars = len(os.path.commonprefix([close, glue]))
        count = 0
        # few ids: the end-of-turn text is a special token and a newline or two
        while count < len(ids) and len(self.decode(ids[: count + 1])) <= n_chars:
            count += 1
        return count

    def _detect_turn_close(self) -> str:
        """The text the template writes after an assistant message (before the next one);
        "" when it cannot be found (then no id is marked as closing a turn)."""
        try:
            text = self.render(
                [
                    {"role": "system", "content": "probe system"},
                    {"role": "user", "content": _DUMMY_USER},
                    {"role": "assistant", "content": _MARK},
                ],
                add_generation_prompt=False,
            )
        except Exception:  # a template that refuses to end on an assistant message
            return ""
        # A template that does not render assistant content verbatim has no findable end
        # of turn either (it fails in fixed_prefix_glue anyway).
        return text.split(_MARK, 1)[1] if text.count(_MARK) == 1 else ""

    def _detect_system_in_user(self) -> bool:
        convo = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        try:
            self.system_in_user = False
            self.render(convo, add_generation_prompt=True)
            return False
        except Exception as err:  # templates signal "no system role" with raise_exception
            try:
                self.system_in_user = True
                self.render(convo, add_generation_prompt=True)
                return True
            except Exception:
                raise UsageError(
                    f"the chat template cannot render a system+user conversation ({err}); "
                    "pass chat_template= explicitly"
                ) from None


def probe_append_only(fmt: ChatFormat) -> bool:
    """True when re-rendering a longer conversation only appends to the shorter one.

    Uses a three-turn conversation with think blocks (templates that strip earlier
    reasoning or count messages fail it).
    """
    messages = [{"role": "system", "content": "probe system"}]
    text = ""
    for t in range(3):
        messages.append({"role": "user", "content": f"probe user {t}"})
        rendered = fmt.render(messages, add_generation_prompt=True)
        if not rendered.startswith(text):
            return False
        reply = f"<think>probe thought {t}</think><answer>probe {t}</answer>"
        messages.append({"role": "assistant", "content": reply})
        text = rendered + reply
    return True


@dataclass
class SampleIds:
    """Token ids of one training sample, with the masks the trainer needs."""

    input_ids: list[int]
    response_mask: list[int]
    gen_logprobs: list[float]
    turn_ends: list[int]
    turn_index: int = 0  # first turn this sample covers
    exact: bool = True  # decode(input_ids) == the template's rendering (delta strategy)
    # 1 on the template ids closing each trainable response (see the module docstring);
    # same length as input_ids, never 1 where response_mask is
    turn_close_mask: list[int] = field(default_factory=list)
    # the observations' pictures ((H, W, 3) uint8), in the order of their placeholders
    images: list = field(default_factory=list)


@dataclass
class _Sequence:
    """A growing token sequence for one conversation (see the module docstring)."""

    fmt: ChatFormat
    system: str
    mode: str
    messages: list[dict[str, str]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    close: list[int] = field(default_factory=list)  # turn_close_mask
    text: str = ""  # expected decode(ids)
    # the template's rendering of the conversation so far: ``text`` without the sampled
    # EOS tails the template does not write (delta compares against this)
    rendered: str = ""
    tail: str = ""  # text of a trailing sampled EOS, consumed by the next glue
    closes_turn: bool = False  # the next glue closes a trainable response
    exact: bool = True
    fallbacks: int = 0
    images: list = field(default_factory=list)  # pictures of the user messages, in order

    def add_user(self, content: str, images: list | None = None) -> None:
        if not self.messages:
            self.messages = [{"role": "system", "content": self.system}]
            self.messages.append({"role": "user", "content": content})
            if not images:  # the commonest prompt: rendered and encoded once per text
                glue, ids = self.fmt.opening(self.system, content)
                self.tail, self.closes_turn = "", False
                self._extend(list(ids), glue, trainable=False)
                return
            glue = self.fmt.render(self.messages, add_generation_prompt=True)
        else:
            self.messages.append({"role": "user", "content": content})
            glue = None
            if self.mode == "delta":
                rendered = self.fmt.render(self.messages, add_generation_prompt=True)
                if self.tail and not rendered.startswith(self.rendered):
                    # a sampled EOS the template does not write here (<|endoftext|> under
                    # ChatML): it stays in the ids, the template's glue follows it whole
                    without = self.rendered[: len(self.rendered) - len(self.tail)]
                    if rendered.startswith(without):
                        self.rendered = without
                if rendered.startswith(self.rendered):
                    glue = rendered[len(self.rendered) :]
                else:  # not append-only for this conversation: switch for good
                    self.mode, self.exact = "fixed_prefix", False
                    self.fallbacks += 1
            if glue is None:
                glue = self.fmt.fixed_prefix_glue(self.system, content)
                if self.tail and glue.startswith(self.tail):
                    glue = glue[len(self.tail) :]
                self.exact = False
        # pictures: the processor expands each placeholder into its ids (VisionChatFormat)
        ids = self.fmt.encode_with_images(glue, images) if images else self.fmt.encode(glue)
        self.images.extend(images or [])
        n_close = self.fmt.turn_close_ids(glue, ids, self.tail) if self.closes_turn else 0
        self.tail, self.closes_turn = "", False
        self._extend(ids, glue, trainable=False, n_close=n_close)

    def add_response(
        self,
        ids: list[int],
        logprobs: list[float] | None,
        trainable: bool,
        ended_by_eos: bool = False,
    ) -> str:
        """Append sampled ids; return the assistant message content (text without EOS tail)."""
        ids = [int(i) for i in ids]
        if logprobs is None or len(logprobs) != len(ids):
            logprobs = [0.0] * len(ids)
        has_tail = bool(ids) and (ended_by_eos or ids[-1] in self.fmt.eos_ids)
        body = ids[:-1] if has_tail else ids
        content = self.fmt.decode(body)
        self.tail = self.fmt.decode(ids[-1:]) if has_tail else ""
        self.ids.extend(ids)
        self.mask.extend([1 if trainable else 0] * len(ids))
        self.close.extend([0] * len(ids))
        self.logprobs.extend(float(x) if trainable else 0.0 for x in logprobs)
        self.text += content + self.tail
        self.rendered += content + self.tail
        if trainable and ids:
            self.turn_ends.append(len(self.ids) - 1)
        self.closes_turn = trainable and bool(ids)
        self.messages.append({"role": "assistant", "content": content})
        return content

    def _extend(self, ids: list[int], text: str, trainable: bool, n_close: int = 0) -> None:
        """Append ``ids`` (the encoding of ``text``); the first ``n_close`` close a turn."""
        self.ids.extend(ids)
        self.mask.extend([int(trainable)] * len(ids))
        self.close.extend([1] * n_close + [0] * (len(ids) - n_close))
        self.logprobs.extend([0.0] * len(ids))
        self.text += text
        self.rendered += text

    def snapshot(self) -> tuple:
        return (
            len(self.ids),
            len(self.images),
            len(self.messages),
            len(self.text),
            self.rendered,  # the string itself: a foreign EOS tail may have been cut
            self.tail,
            self.closes_turn,
            self.mode,
            self.exact,
            self.fallbacks,
        )

    def restore(self, snap: tuple) -> None:
        (
            n_ids,
            n_images,
            n_msgs,
            n_text,
            self.rendered,
            self.tail,
            self.closes_turn,
            self.mode,
            self.exact,
            self.fallbacks,
        ) = snap
        del self.ids[n_ids:], self.mask[n_ids:], self.logprobs[n_ids:], self.close[n_ids:]
        del self.messages[n_msgs:], self.images[n_images:]
        self.text = self.text[:n_text]

    def sample(self, turn_index: int) -> SampleIds:
        roundtrip = self.fmt.decode(self.ids) == self.text
        return SampleIds(
            input_ids=list(self.ids),
            response_mask=list(self.mask),
            gen_logprobs=list(self.logprobs),
            turn_ends=list(self.turn_ends),
            turn_index=turn_index,
            exact=self.exact and roundtrip,
            turn_close_mask=list(self.close),
            images=list(self.images),
        )


@dataclass
class _Turn:
    user: str
    ids: list[int]
    logprobs: list[float] | None
    ended_by_eos: bool
    images: list = field(default_factory=list)


class ContextManager:
    """Prompts and training samples of ONE episode under a context policy.

    Per turn: ``prompt = next_prompt(user_text)``; either ``add_response(ids, logprobs)``
    or, when the prompt is too long, ``cancel_prompt()``. At the end ``samples()``.

    ``window=None``: full history, one sample whose mask covers every turn's sampled ids.
    ``window=k``: turn t is prompted with system + turns t-k..t-1 + user t and becomes
    its own sample (``turn_index=t``) whose only trainable segment is turn t's ids.
    """

    def __init__(self, fmt: ChatFormat, system: str, window: int | None = None) -> None:
        if window is not None and window < 0:
            raise ConfigError(f"context window must be >= 0 turns or None, got {window}")
        self.fmt, self.system, self.window = fmt, system, window
        self.turns: list[_Turn] = []
        self._full = _Sequence(fmt, system, fmt.strategy)
        self._pending: _Sequence | None = None  # the sequence holding the open prompt
        self._pending_user: str | None = None
        self._pending_images: list = []
        self._snapshot: tuple | None = None
        self._window_samples: list[SampleIds] = []
        self.fallbacks = 0

    def next_prompt(self, user: str, images: list | None = None) -> list[int]:
        """Token ids of the prompt for the next turn, ending with the generation prompt.

        ``images``: the pictures of ``user``'s image placeholders (a visual env's
        observation); the prompt's pictures are then :attr:`prompt_images`."""
        if self._pending is not None:
            raise RuntimeError("next_prompt called twice without add_response/cancel_prompt")
        if self.window is None:
            seq = self._full
            self._snapshot = seq.snapshot()
        else:
            seq = _Sequence(self.fmt, self.system, self.fmt.strategy)
            for turn in self.turns[max(0, len(self.turns) - self.window) :] if self.window else []:
                seq.add_user(turn.user, turn.images)
                seq.add_response(turn.ids, turn.logprobs, False, turn.ended_by_eos)
        seq.add_user(user, images)
        self._pending, self._pending_user = seq, user
        self._pending_images = list(images or [])
        return list(seq.ids)

    def add_response(
        self, ids: list[int], logprobs: list[float] | None = None, ended_by_eos: bool = False
    ) -> str:
        """Record the sampled ids of the open prompt; returns the assistant content text.

        ``ended_by_eos``: the last id is an end-of-sequence token (``finish_reason ==
        "eos"``); ids in ``ChatFormat.eos_ids`` are recognised without it.
        """
        seq = self._take_pending()
        content = seq.add_response(ids, logprobs, True, ended_by_eos)
        self.turns.append(
            _Turn(self._pending_user or "", list(ids), logprobs, ended_by_eos, self._pending_images)
        )
        if self.window is not None:
            self.fallbacks += seq.fallbacks
            self._window_samples.append(seq.sample(turn_index=len(self.turns) - 1))
        return content

    def cancel_prompt(self) -> None:
        """Drop the open prompt (the episode ends before it is answered)."""
        seq = self._take_pending()
        if seq is self._full and self._snapshot is not None:
            seq.restore(self._snapshot)

    def samples(self) -> list[SampleIds]:
        """Full history: one sample. Window: one sample per answered turn."""
        if self._pending is not None:
            self.cancel_prompt()
        if self.window is not None:
            return list(self._window_samples)
        return [self._full.sample(turn_index=0)]

    @property
    def prompt_images(self) -> list:
        """The pictures of the open prompt, in the order of their placeholders (the whole
        history's under ``window=None``; the last ``window`` turns' and the new one's
        otherwise): what the model's forward pass needs next to the prompt ids."""
        if self._pending is None:
            raise RuntimeError("no open prompt: call next_prompt first")
        return list(self._pending.images)

    @property
    def num_fallbacks(self) -> int:
        return self._full.fallbacks if self.window is None else self.fallbacks

    def _take_pending(self) -> _Sequence:
        if self._pending is None:
            raise RuntimeError("no open prompt: call next_prompt first")
        seq, self._pending = self._pending, None
        return seq
