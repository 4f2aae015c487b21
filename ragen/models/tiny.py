"""Tiny, randomly initialized models (and their tokenizers) for tests and the CPU demo.

    >>> from ragen.models.tiny import create_tiny
    >>> path = create_tiny("runs/tiny", seed=0)   # tiny:micro, 2.9M parameters; offline
    >>> model, tok = ragen.models.load_policy(path)

or ``ragen models create-tiny --out runs/tiny``. "tiny" without a size means
:data:`DEFAULT_SIZE` (``tiny:micro``) everywhere: ``create-tiny``, ``create_tiny``,
``model=tiny`` and ``load_policy("tiny")``; other sizes are named (``tiny:nano``, the demo's).

What gets built, deterministically from ``seed`` (same seed -> byte-identical files):

1. A byte-level BPE tokenizer (``tokenizers`` library) trained on text the agent will
   actually see: every registered environment's instructions and rendered states
   (a few seeds, a few random actions each), plus prompt/response templates
   (``<think>``/``<answer>`` tags, "Turn 1", "actions left", action words, digits,
   arithmetic). Vocabulary ~3k. ``<think>``, ``</think>``, ``<answer>``, ``</answer>``
   and the reasoning sections' tags (``<observation>``, ``<reasoning>``,
   ``<prediction>`` and their closing tags) are single, non-special added tokens (they decode like text); the chat format's
   control tokens are special tokens. eos = the end-of-turn token, so generation stops
   at the end of an assistant turn. The Jinja chat template supports
   ``add_generation_prompt``.
2. A Qwen2-architecture causal LM (tied embeddings, ``max_position_embeddings`` 4096)
   with random weights, saved as safetensors.

The tokenizer does not depend on ``seed`` (only the weights do), so models of one chat
format share token ids.
"""

from __future__ import annotations

import functools
import json
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

import ragen.envs as envs
from ragen.errors import ConfigError, UsageError

from .hf_setup import quiet_transformers

# ---------------------------------------------------------------------------------------
# Chat formats
# ---------------------------------------------------------------------------------------

#: tags the agent's response format uses; each becomes ONE non-special added token
TAG_TOKENS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    # the sections of the structured reasoning formats (ragen.agent.reasoning)
    "<observation>",
    "</observation>",
    "<reasoning>",
    "</reasoning>",
    "<prediction>",
    "</prediction>",
]

_CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Llama-3 style: bos once, a header per message, content trimmed, <|eot_id|> ends a turn.
_LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)


@dataclass(frozen=True)
class ChatFormat:
    name: str
    special_tokens: tuple[str, ...]  # ids 0..n-1, in this order
    eos: str  # end of an assistant turn: generation stops here
    pad: str
    bos: str | None
    template: str
    extra_eos: tuple[str, ...] = ()  # also stop generation (end of document)


CHAT_FORMATS: dict[str, ChatFormat] = {
    "chatml": ChatFormat(
        name="chatml",
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        eos="<|im_end|>",
        pad="<|endoftext|>",
        bos=None,
        template=_CHATML_TEMPLATE,
        extra_eos=("<|endoftext|>",),
    ),
    "llama3": ChatFormat(
        name="llama3",
        special_tokens=(
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
        ),
        eos="<|eot_id|>",
        pad="<|finetune_right_pad_id|>",
        bos="<|begin_of_text|>",
        template=_LLAMA3_TEMPLATE,
        extra_eos=("<|end_of_text|>",),
    ),
}

# ---------------------------------------------------------------------------------------
# Model presets (exact parameter counts with the ~3k vocabulary are in docs/MODELS.md)
# ---------------------------------------------------------------------------------------

DEFAULT_SIZE = "micro"  # what "tiny" means without a size, in every command and API
# rounded parameter counts with the ~3k chatml vocabulary (exact ones: docs/MODELS.md)
PARAMETERS = {"nano": "1.2M", "micro": "2.9M", "small": "7.8M", "base": "29.8M"}

PRESETS: dict[str, dict[str, int]] = {
    # name: hidden, layers, attention heads, kv heads (GQA), MLP width
    "nano": dict(
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
    ),
    "micro": dict(
        hidden_size=192,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=2,
        intermediate_size=512,
    ),
    "small": dict(
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=896,
    ),
    "base": dict(
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=1792,
    ),
}

MAX_POSITIONS = 4096
BPE_VOCAB_SIZE = 3000  # before the 4 tag tokens; the corpus may yield slightly fewer
_CORPUS_SEED = 1234  # the tokenizer is independent of the model seed on purpose

# Pre-tokenization: a word is one letter plus any lowercase letters after it (with an
# optional leading space), so "Turn", " actions", " a" stay whole; every other character
# is its own pre-token: digits (good for arithmetic), punctuation, and above all grid
# cells ("P" in "#_P_X#" is a letter with no lowercase after it). Qwen2's pattern
# merges runs like "_O__" or "###__#" into one token, and a small model must then find
# the player inside opaque multi-cell tokens; with one token per cell, a cell's row and
# column are relative positions.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}\p{Ll}*|\p{N}"
    r"| ?[^\s\p{L}\p{N}]|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ---------------------------------------------------------------------------------------
# Training corpus for the BPE tokenizer
# ---------------------------------------------------------------------------------------

_ACTION_WORDS = [
    "Up", "Down", "Left", "Right", "up", "down", "left", "right", "Push", "push",
    "Move", "move", "Stay", "North", "South", "East", "West",
]  # fmt: skip
_NOUNS = [
    "box", "boxes", "target", "wall", "player", "hole", "goal", "ice", "lake", "grid",
    "room", "arm", "arms", "reward", "number", "numbers", "equation", "state", "path",
    "row", "column", "cell", "position", "action", "answer", "turn", "step", "move",
]  # fmt: skip
# Common English words so the tokenizer has whole-word tokens for ordinary reasoning text.
_WORDS = """
the be to of and a in that have it for not on with he as you do at this but his by from
they we say her she or an will my one all would there their what so up out if about who
get which go me when make can like time no just him know take people into year your good
some could them see other than then now look only come its over think also back after use
two how our work first well way even new want because any these give day most us is are
was were been has had did does done said made went gone got seen known taken given found
should must may might shall need try tried left right down move moved moving push pushed
pushing pull box boxes target targets wall walls player floor empty goal hole holes frozen
lake ice safe slippery slip start end step steps turn turns action actions valid invalid
answer answers think thought thoughts reason reasoning plan plans state states observation
reward rewards score win won lose lost success fail failed solve solved puzzle puzzles game
games room rooms grid map row rows column columns cell cells position positions place
near far next above below beside between around corner edge blocked block blocks free open
closed path paths route shortest longest distance close closer closest away toward towards
north south east west up down top bottom middle center side sides first second third last
number numbers equation equations equal equals sum product difference plus minus times
divide divided multiply multiplied add added subtract subtracted result total value values
each every both either neither none some many few more less most least all any once twice
zero one two three four five six seven eight nine ten eleven twelve hundred thousand
arm arms bandit pull pulled risk risky safe safer low high higher lower expected payout
probability chance chances choose chose chosen choice option options pick picked better
best worse worst because since therefore so thus hence however but although while until
before after again still already yet also only just even then now here there where when
why how what which who whom whose this that these those it its itself I me my mine you
your yours we our ours they them their theirs he him his she her hers is am are was were
be being been do does did doing have has having had can could will would shall should
may might must need needs want wants try tries trying keep keeps kept avoid avoids avoided
reach reaches reached go goes going went follow follows followed check checks checked
see sees saw look looks looked find finds found get gets got make makes made use uses used
let lets say says said tell tells told know knows knew show shows showed work works worked
call calls called ask asks asked seem seems seemed feel feels felt leave leaves become
put puts mean means meant set sets run runs ran play plays played stop stops stopped
helpful assistant agent environment instructions rules format output text response
maximum minimum max min length words tokens token strictly follow always never note
example examples correct incorrect wrong true false yes no ok okay maybe sure clear
symbol symbols legend means represents character characters letter letters digit digits
system user assistant
"""
_WORD_LIST = sorted(set(_WORDS.split()))

_NAMES = ["Phoenix", "Dragon", "Tiger", "Eagle", "Lion", "Wolf", "Serpent", "Turtle"]
_THOUGHTS = [
    "I should move {a} to get closer to the {n}.",
    "The {n} is to the {a}, so I will go {a}.",
    "If I push the box {a}, it lands on the target.",
    "There is a wall {a} of me; I need another path.",
    "Moving {a} avoids the hole and reaches the goal.",
    "The {n} at row {i}, column {j} blocks the way.",
    "Let me check: {x} + {y} = {s}, and {s} * {z} = {p}.",
    "I choose the {name} arm because it looks safer.",
    "The {name} arm has a higher expected reward.",
    "First go {a}, then {b}.",
    "The player is at ({i}, {j}) and the target is at ({k}, {l}).",
]


def _template_texts(rng: random.Random) -> list[str]:
    """Synthetic prompts and responses in the agent's format (covers what envs may lack)."""
    texts = []
    for turn in range(1, 11):
        n_left = rng.randint(1, 10)
        texts.append(
            f"Turn {turn}:\nState:\n#####\n#_P_#\n#_X_#\n#####\n"
            f"You have {n_left} actions left. Always output: <think> [Your thoughts] </think> "
            "<answer> [your answer] </answer> with no extra text. Strictly follow this format. "
            f"Max response length: {rng.choice([50, 100, 200])} words (tokens).\n"
            f"Reward: {rng.choice(['-0.1', '0.0', '1.0', '10.0', '0.15'])}\n"
        )
    for _ in range(400):
        a, b = rng.choice(_ACTION_WORDS), rng.choice(_ACTION_WORDS)
        x, y, z = rng.randint(1, 99), rng.randint(1, 99), rng.randint(1, 9)
        thought = rng.choice(_THOUGHTS).format(
            a=a.lower(), b=b.lower(), n=rng.choice(_NOUNS), name=rng.choice(_NAMES),
            i=rng.randint(0, 7), j=rng.randint(0, 7), k=rng.randint(0, 7), l=rng.randint(0, 7),
            x=x, y=y, s=x + y, z=z, p=(x + y) * z,
        )  # fmt: skip
        n_actions = rng.randint(1, 5)
        actions = " || ".join(rng.choice(_ACTION_WORDS) for _ in range(n_actions))
        if rng.random() < 0.2:
            actions = f"({x} + {y}) * {z} - {rng.randint(1, 9)}"
        elif rng.random() < 0.1:
            actions = rng.choice(_NAMES)
        texts.append(f"<think>{thought}</think><answer>{actions}</answer>")
        texts.append(f"<think> {thought} </think> <answer> {actions} </answer>")
    for _ in range(3000):
        n = rng.randint(4, 14)
        # some capitalized words and some after newlines, so each word also gets its
        # "Word" / "word" / " word" / " Word" variants
        words = [w.capitalize() if rng.random() < 0.2 else w for w in rng.sample(_WORD_LIST, n)]
        sep = rng.choice([" ", " ", " ", "\n"])
        texts.append(sep.join(words) + rng.choice([".", ".", ",", "?", "!", ":", ";"]))
    for _ in range(100):
        nums = [rng.randint(1, 100) for _ in range(rng.randint(2, 4))]
        target = rng.randint(1, 200)
        texts.append(
            f"Using the numbers {nums}, create an equation that equals {target}. "
            "You can use basic arithmetic operations (+, -, *, /) and each number once."
        )
    texts.append("0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 + - * / = ( ) [ ] , . : ; ! ?")
    texts.append(
        "You are a helpful assistant. You are solving a puzzle. Think step by step, "
        "then give your answer. The answer must be one of the valid actions."
    )
    return texts


#: the environments whose texts train the tokenizer. A fixed list, not every registered
#: env: registering a new environment (or a test registering one) must not change the
#: vocabulary, and with it every tiny model, their parameter counts and measured results.
CORPUS_ENVS = (
    "bandit",
    "bandit_reversed",
    "bandit_test",
    "countdown",
    "frozen_lake",
    "frozen_lake_det",
    "gym_frozen_lake",
    "gym_taxi",
    "sokoban",
    "sokoban_large",
    "sokoban_symbols",
)


def _env_texts(rng: random.Random) -> list[str]:
    """Instructions and rendered states of the :data:`CORPUS_ENVS` environments.

    Environments are written by others and may be mid-change: an env that fails to
    import, build or step is skipped rather than breaking model creation, with a
    warning, since the tokenizer (and so every tiny model) then differs from everyone
    else's. A GPU session found one such case: without gymnasium the two gym_* envs
    dropped out silently and the same seed built another tokenizer.
    """
    try:
        names = [name for name in envs.names() if name in CORPUS_ENVS]
    except Exception:  # the env package is optional for the tokenizer
        return []
    texts: list[str] = []
    for name in names:
        try:
            env = envs.make(name)
            texts.append(str(env.instructions))
            for seed in range(3):
                texts.append(str(env.reset(seed)))
                for _ in range(4):
                    try:
                        action = env.random_action(rng)
                    except NotImplementedError:
                        break
                    obs, _, terminated, truncated, _ = env.step(action)
                    texts += [str(action), str(obs)]
                    if terminated or truncated:
                        break
        except Exception as err:  # a broken env must not break the tokenizer
            warnings.warn(
                f"tiny tokenizer: env {name!r} was left out of the training corpus "
                f"({type(err).__name__}: {err}); this tokenizer, and every tiny model built "
                "with it, differs from a standard install's. Fix: pip install -e . (all of "
                "ragen's dependencies)",
                stacklevel=2,
            )
            continue
    missing = sorted(set(CORPUS_ENVS) - set(names))
    if missing:
        warnings.warn(f"tiny tokenizer: envs {missing} are not registered", stacklevel=2)
    return texts


@functools.lru_cache(maxsize=1)
def training_corpus() -> tuple[str, ...]:
    """The BPE training text, built once per process (kept in memory, never on disk)."""
    rng = random.Random(_CORPUS_SEED)
    return tuple(_env_texts(rng) + _template_texts(rng))


# ---------------------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _trained_backend(chat_format: str) -> str:
    """The trained ``tokenizers`` model as JSON (trained once per process and format)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    fmt = _chat_format(chat_format)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(fmt.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(training_corpus()), trainer=trainer)
    # Tags: single ids that decode as text (not special, so skip_special_tokens keeps them).
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    return tok.to_str()


def describe(size: str = DEFAULT_SIZE) -> str:
    """``"tiny:micro, 2.9M parameters"``: how every message names a tiny model."""
    return f"tiny:{size}, {PARAMETERS[size]} parameters"


def build_tokenizer(chat_format: str = "chatml"):
    """Train the byte-level BPE tokenizer; returns a (new) ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fmt = _chat_format(chat_format)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_backend(chat_format)),
        eos_token=fmt.eos,
        pad_token=fmt.pad,
        bos_token=fmt.bos,
        unk_token=None,
        model_max_length=MAX_POSITIONS,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = fmt.template
    return tokenizer


def tiny_qwen2_config(size: str, tokenizer, eos_token_id: int, **extra):
    """The ``Qwen2Config`` of preset ``size`` over ``tokenizer`` (the tiny LM, and the
    text half of the tiny VLMs); ``extra`` adds config fields."""
    from transformers import Qwen2Config

    if size not in PRESETS:
        raise ConfigError(f"unknown tiny model size {size!r}; choose one of {', '.join(PRESETS)}")
    return Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos_token_id,
        use_sliding_window=False,
        **extra,
        **PRESETS[size],
    )


def build_model(size: str, tokenizer, seed: int = 0, chat_format: str = "chatml"):
    """A randomly initialized ``Qwen2ForCausalLM`` sized by preset ``size``."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    fmt = _chat_format(chat_format)
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (fmt.eos, *fmt.extra_eos)]
    config = tiny_qwen2_config(size, tokenizer, eos_ids[0], bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id, bos_token_id=config.bos_token_id
    )
    return model.eval()


def create_tiny(
    out_dir: str | Path, size: str = DEFAULT_SIZE, seed: int = 0, chat_format: str = "chatml"
) -> Path:
    """Build a tiny model + tokenizer and save them (HF format) to ``out_dir``; return it.

    Offline and deterministic: the same ``(size, seed, chat_format)`` writes identical
    ``tokenizer.json`` and ``model.safetensors``.
    """
    if size not in PRESETS:
        raise ConfigError(f"unknown tiny model size {size!r}; choose one of {', '.join(PRESETS)}")
    _chat_format(chat_format)
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder. Fix: pick another --out")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(chat_format)
    model = build_model(size, tokenizer, seed=seed, chat_format=chat_format)
    with quiet_transformers():
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    info = {"size": size, "seed": seed, "chat_format": chat_format, "num_parameters": n_params}
    (out / "ragen_tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


def _chat_format(name: str) -> ChatFormat:
    if name not in CHAT_FORMATS:
        raise ConfigError(f"unknown chat format {name!r}; choose one of {', '.join(CHAT_FORMATS)}")
    return CHAT_FORMATS[name]
