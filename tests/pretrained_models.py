"""Tiny Hugging Face models built and saved here, for the tests of posexp/pretrained: a
byte-level BPE trained with the tokenizers library (saved as a PreTrainedTokenizerFast), a
Llama-style model, a GPT-NeoX-style model with partial rotary embeddings, a Llama with
LongRoPE factors of its own, and a GPT-2 (learned positions).  Nothing is downloaded.
Weights are drawn wider than transformers' default (std 0.02) so that positions change
the losses: a scaling that did nothing would be seen."""

from __future__ import annotations

import random
from pathlib import Path

CONTEXT = 64  # every model's max_position_embeddings: the length it is "trained" at
WORDS = ["the", "grass", "is", "green", "sky", "blue", "sun", "yellow", "here", "we", "go",
         "there", "and", "back", "again", "pass", "key", "remember", "what", "important",
         "info", "hidden", "inside", "lot", "of", "irrelevant", "text", "find", "it", "quiz"]
SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": CONTEXT, "initializer_range": 0.2,
         "bos_token_id": 0, "eos_token_id": 1}


def corpus(directory: Path, documents: int = 30, seed: int = 0) -> Path:
    """ASCII text files of words (one file a document)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        words = [rng.choice(WORDS) for _ in range(rng.randint(150, 600))]
        (directory / f"doc{i:02d}.txt").write_text(" ".join(words) + ".\n")
    return directory


def tokenizer():
    """A byte-level BPE of about 400 tokens, BOS <s> (id 0) before every encoded text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from posexp.pretrained.passkey import FILLER, INTRO, KEY_LINE, QUESTION

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [INTRO, *FILLER, KEY_LINE.format(key="12345"), QUESTION, " ".join(WORDS)] * 20
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def save(model, directory: Path) -> Path:
    model.save_pretrained(directory)
    tokenizer().save_pretrained(directory)
    return directory


def llama(directory: Path, seed: int = 0, **rope) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**SHAPE, num_key_value_heads=2, vocab_size=400,
                         **({"rope_parameters": rope} if rope else {}))
    return save(LlamaForCausalLM(config), directory)


def longrope_llama(directory: Path) -> Path:
    """A Llama that ships LongRoPE factors of its own (as Phi-3 does)."""
    half = SHAPE["hidden_size"] // SHAPE["num_attention_heads"] // 2
    return llama(directory, seed=1, rope_type="longrope", rope_theta=10000.0, factor=1.0,
                 original_max_position_embeddings=CONTEXT,
                 short_factor=[1.0] * half, long_factor=[1.0 + i for i in range(half)])


def neox(directory: Path, seed: int = 0) -> Path:
    """GPT-NeoX with rotary embeddings on half of each head (partial_rotary_factor 0.5)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    config = GPTNeoXConfig(**SHAPE, vocab_size=400, rotary_pct=0.5)
    return save(GPTNeoXForCausalLM(config), directory)


def gpt2(directory: Path, seed: int = 0) -> Path:
    """GPT-2: a learned table of CONTEXT absolute positions."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=CONTEXT, vocab_size=400,
                        bos_token_id=0, eos_token_id=1)
    return save(GPT2LMHeadModel(config), directory)


def build(root: Path) -> dict[str, Path]:
    """Every model, and a corpus, under ``root``."""
    return {"llama": llama(root / "tiny-llama"), "neox": neox(root / "tiny-neox"),
            "longrope": longrope_llama(root / "tiny-longrope"), "gpt2": gpt2(root / "tiny-gpt2"),
            "corpus": corpus(root / "corpus")}
