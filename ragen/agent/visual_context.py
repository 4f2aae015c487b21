"""Token-exact multi-turn sequences with pictures: the chat format of a VLM's processor.

:class:`VisionChatFormat` is :class:`~ragen.agent.context.ChatFormat` for a
vision-language model; the context machinery (``ContextManager``: delta / fixed-prefix
glue, EOS tails, turn-close ids, windows) is unchanged. What differs:

* **Rendering.** Every message goes to the template as a list of parts, the form VLM
  templates expect: each :data:`~ragen.envs.visual.IMAGE_PLACEHOLDER` of a visual
  env's observation becomes ``{"type": "image"}`` and the text around it
  ``{"type": "text"}`` parts. The template itself writes the model's image entry
  (``<image>`` for LLaVA, ``<|vision_start|><|image_pad|><|vision_end|>`` for
  Qwen2-VL, ...), one per observation.
* **Encoding.** Template text that holds image entries is encoded by the processor
  itself, ``processor(text=..., images=...)``, which expands each entry into the ids
  the vision features replace (36 ``<image>`` ids for the tiny VLM's 84x84 input). So
  the prompt ids are exactly the processor's; the sampled ids are appended verbatim,
  and the image ids lie in template segments, never in the loss (M_loss = 0) nor in
  the advantage recursion (M_adv covers sampled ids and, optionally, turn-close ids).
* **Decoding.** The processor's expansion of one image entry (learned per picture
  size by encoding a bare entry) decodes back as the entry, so ``decode(input_ids)``
  equals the template's rendering (``Trajectory.context_exact``).

The pictures themselves travel next to the ids (``SampleIds.images``,
``Trajectory.images``) and become ``pixel_values`` at each forward pass
(``ragen.models.vlm.pixel_inputs``).
"""

from __future__ import annotations

from typing import Any

from ragen.envs.visual import IMAGE_PLACEHOLDER
from ragen.models.vlm import image_token_id, is_processor

from .context import ChatFormat


def to_parts(content: str) -> list[dict[str, str]]:
    """``"<image>\\nrest"`` -> ``[{"type": "image"}, {"type": "text", "text": "\\nrest"}]``."""
    parts: list[dict[str, str]] = []
    pieces = content.split(IMAGE_PLACEHOLDER)
    for k, piece in enumerate(pieces):
        if k:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts or [{"type": "text", "text": ""}]


class VisionChatFormat(ChatFormat):
    """The chat format of a multimodal ``processor`` (see the module docstring)."""

    def __init__(
        self, processor: Any, strategy: str = "auto", eos_ids: list[int] | None = None
    ) -> None:
        self.processor = processor
        self.image_token_id = image_token_id(processor)
        template = getattr(processor, "chat_template", None) or getattr(
            processor.tokenizer, "chat_template", None
        )
        self._expansions: set[tuple[int, ...]] = set()
        self._expansion_keys: set[tuple] = set()
        # the text the template writes for one image, and its plain token ids
        self._entry = getattr(processor, "image_token", None) or "<image>"
        super().__init__(processor.tokenizer, template, strategy, eos_ids)
        self._entry_ids = self.encode(self._entry)

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        if self.system_in_user and messages and messages[0]["role"] == "system":
            system, rest = messages[0]["content"], list(messages[1:])
            if rest:
                rest[0] = {"role": rest[0]["role"], "content": f"{system}\n\n{rest[0]['content']}"}
            messages = rest
        parted = [{"role": m["role"], "content": to_parts(m["content"])} for m in messages]
        return self.tokenizer.apply_chat_template(
            parted,
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def encode_with_images(self, text: str, images: list) -> list[int]:
        """The processor's ids of ``text`` (image entries expanded) for ``images``."""
        for image in images:
            self._learn_expansion(image)
        out = self.processor(text=[text], images=[list(images)], add_special_tokens=False)
        return [int(i) for i in out["input_ids"][0]]

    def _learn_expansion(self, image: Any) -> None:
        """Remember the ids one bare image entry expands to for a picture of this size
        (the processor's own expansion), so :meth:`decode` can fold them back."""
        key = tuple(getattr(image, "shape", ()))
        if key in self._expansion_keys:
            return
        self._expansion_keys.add(key)
        ids = self.processor(text=[self._entry], images=[[image]], add_special_tokens=False)
        expansion = tuple(int(i) for i in ids["input_ids"][0])
        if expansion:
            self._expansions.add(expansion)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with every expanded image folded back into its entry, so that
        it compares with the template's rendering."""
        if not self._expansions:
            return super().decode(ids)
        ids, out, i = list(ids), [], 0
        firsts = {e[0]: [x for x in self._expansions if x[0] == e[0]] for e in self._expansions}
        entry = self._entry_ids
        while i < len(ids):
            for expansion in firsts.get(ids[i], ()):
                if tuple(ids[i : i + len(expansion)]) == expansion:
                    out.extend(entry)
                    i += len(expansion)
                    break
            else:
                out.append(ids[i])
                i += 1
        return super().decode(out)


def chat_format_for(tokenizer_or_processor: Any, strategy: str, eos_ids: list[int] | None):
    """A :class:`VisionChatFormat` for a processor, a plain ``ChatFormat`` otherwise."""
    if is_processor(tokenizer_or_processor):
        return VisionChatFormat(tokenizer_or_processor, strategy=strategy, eos_ids=eos_ids)
    return ChatFormat(tokenizer_or_processor, strategy=strategy, eos_ids=eos_ids)
