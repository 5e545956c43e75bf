"""A tiny causal LM for the conductor's tests, built from a config: a byte-level BPE tokenizer trained here,
offline, on the texts it will read and write, and a 2-layer Llama with random weights. Seeded."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path


def build(out: Path, corpus: Iterable[str], *, vocab: int = 400, hidden: int = 64, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<eos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(list(corpus), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def teach(
    folder: Path,
    prompts: Sequence[str],
    completions: Sequence[str],
    *,
    steps: int = 60,
    lr: float = 1e-2,
    batch: int = 16,
) -> None:
    """Fit the model in `folder` (in place) to answer each prompt with its completion (loss on the completion
    only): a plain torch loop, far cheaper than a trainer on a loaded machine, for tests that need a model
    that already writes workflows. Seeded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    torch.set_num_threads(1)  # two OpenMP threads spin badly on a busy machine
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    rows = []
    for prompt, completion in zip(prompts, completions, strict=True):
        p, c = tok(prompt)["input_ids"], tok(completion)["input_ids"] + [tok.eos_token_id]
        rows.append((p + c, [-100] * len(p) + c))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        part = [rows[(step * batch + i) % len(rows)] for i in range(min(batch, len(rows)))]
        width = max(len(ids) for ids, _ in part)
        ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x, _ in part])  # [b, t]
        labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in part])
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in part])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(str(folder))
