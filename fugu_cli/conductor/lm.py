"""The trained conductor's language model: load any local Hugging Face causal-LM folder, generate workflows,
fine-tune it (supervised warm start with TRL's SFTTrainer, then TRL's GRPOTrainer), save it.

The only module that imports torch, transformers, peft, trl or datasets for the conductor, always inside a
function. Never prints: progress goes to the callbacks.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fugu_cli.errors import UsageError

META = "conductor.json"  # beside the weights of a trained conductor


@dataclass(frozen=True)
class LMConfig:
    """How to fine-tune. Defaults fit a CPU; on a GPU raise `group`, `prompts_per_step`, `steps`."""

    steps: int = 40  # GRPO optimiser steps
    group: int = 4  # workflows sampled per prompt (GRPO's group)
    prompts_per_step: int = 2
    learning_rate: float = 2e-5
    completion_tokens: int = 96
    temperature: float = 1.0
    beta: float = 0.0  # KL toward the starting model: none, as in the research
    lora_rank: int = 16  # 0: full fine-tune
    lora_alpha: int = 32
    sft_steps: int = 40  # warm start (0: none)
    sft_learning_rate: float = 2e-4
    sft_batch: int = 8
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    bf16: bool = False
    threads: int | None = None  # CPU threads for torch (None: its default)


@dataclass
class Policy:
    model: Any  # a transformers PreTrainedModel (or a peft model while training)
    tokenizer: Any
    path: Path


StepLog = Callable[[int, int, dict[str, float]], None]  # (step, of steps, logged figures)
Reward = Callable[[list[str], list[int]], list[float]]  # (completions, item ids) -> rewards


def load(path: Path, *, device: str = "auto", threads: int | None = None) -> Policy:
    """A causal LM and its tokenizer from a local folder (a base model, or a trained conductor)."""
    check_folder(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _silence()
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    model.to(_device(device))
    model.eval()
    return Policy(model, tokenizer, path)


def _silence() -> None:
    """No progress bars from transformers (loading, saving): progress is ours to show."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def _dataset_class() -> Any:
    """`datasets.Dataset`, its progress bars (maps) off. Imported by training only: a conductor that only
    plans (ultra mode, `fugu conductor eval`) is spared its import, 0.7 s of CPU."""
    import datasets

    datasets.disable_progress_bars()
    return datasets.Dataset


def check_folder(path: Path) -> None:
    if not (path / "config.json").is_file():
        raise UsageError(f"{path} is not a Hugging Face model folder (no config.json)")


def _device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def generate(
    policy: Policy,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 96,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    batch: int = 8,
) -> list[str]:
    """One completion per prompt (greedy unless `sample`), without the prompt and special tokens."""
    import torch

    tok, model = policy.tokenizer, policy.model
    torch.manual_seed(seed)
    out: list[str] = []
    for s in range(0, len(prompts), batch):
        enc = tok(list(prompts[s : s + batch]), return_tensors="pt", padding=True).to(model.device)
        with torch.no_grad():
            ids = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
            )
        new = ids[:, enc["input_ids"].shape[1] :]  # [b, new tokens]
        out.extend(tok.batch_decode(new, skip_special_tokens=True))
    return out


def _lora(cfg: LMConfig) -> Any:
    if cfg.lora_rank <= 0:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules="all-linear"
    )


def _common(cfg: LMConfig, out: str) -> dict[str, Any]:
    cpu = _device(cfg.device) == "cpu"
    return {
        "output_dir": out,
        "report_to": "none",
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": cfg.seed,
        "use_cpu": cpu,
        "bf16": cfg.bf16 and not cpu,
        # recomputing activations saves a GPU's memory; a CPU has the memory and not the time to spare
        _checkpointing_option(): not cpu,
        "dataloader_num_workers": 0,
    }


def _checkpointing_option() -> str:
    """transformers 5 calls `gradient_checkpointing` `activation_checkpointing`: the old name still works, but
    warns (even unset: TRL's configs set it) and goes in v6; the new name sets both."""
    from transformers import TrainingArguments

    names = {f.name for f in fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def _merged(model: Any) -> Any:
    """A LoRA-wrapped model with its adapter folded in (a plain model is returned as it is)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def sft(
    policy: Policy,
    prompts: Sequence[str],
    completions: Sequence[str],
    cfg: LMConfig,
    on_step: StepLog | None = None,
) -> None:
    """Supervised warm start on (prompt, workflow) pairs, loss on the workflow only (TRL's SFTTrainer);
    `on_step(step, of steps, figures)` after each step, with its loss."""
    if cfg.sft_steps <= 0 or not prompts:
        return
    Dataset = _dataset_class()
    from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

    data = Dataset.from_dict({"prompt": list(prompts), "completion": list(completions)})
    with tempfile.TemporaryDirectory(prefix="fugu-sft-") as tmp:
        args = SFTConfig(
            **_common(cfg, tmp),
            max_steps=cfg.sft_steps,
            learning_rate=cfg.sft_learning_rate,
            per_device_train_batch_size=cfg.sft_batch,
            lr_scheduler_type="constant",
            completion_only_loss=True,
            max_length=None,
        )
        trainer = SFTTrainer(
            model=policy.model,
            args=args,
            train_dataset=data,
            processing_class=policy.tokenizer,
            peft_config=_lora(cfg),
            callbacks=[_progress(on_step, "loss")],
        )
        _quiet(trainer)
        trainer.train()
        policy.model = _merged(trainer.model)
    policy.model.eval()


def _progress(on_step: StepLog | None, key: str) -> Any:
    """A trainer callback handing each logged step that has `key` (SFT: loss, GRPO: reward) to `on_step`."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if on_step is not None and logs and key in logs:
                figures = {k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
                on_step(int(state.global_step), int(state.max_steps), figures)

    return Progress()


def _quiet(trainer: Any) -> None:
    """Progress is ours to show: drop the trainer's own printing of every log line."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def grpo(
    policy: Policy,
    prompts: Sequence[str],
    reward: Reward,
    cfg: LMConfig,
    on_step: StepLog | None = None,
) -> None:
    """GRPO on `prompts` (TRL's GRPOTrainer): `reward(completions, item ids)` scores each group."""
    Dataset = _dataset_class()
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    data = Dataset.from_dict({"prompt": list(prompts), "item": list(range(len(prompts)))})

    def reward_func(completions: list[str], item: list[int], **_: Any) -> list[float]:
        return reward(list(completions), [int(i) for i in item])

    with tempfile.TemporaryDirectory(prefix="fugu-grpo-") as tmp:
        args = GRPOConfig(
            **_common(cfg, tmp),
            max_steps=cfg.steps,
            learning_rate=cfg.learning_rate,
            per_device_train_batch_size=cfg.group * cfg.prompts_per_step,
            gradient_accumulation_steps=1,
            num_generations=cfg.group,
            max_completion_length=cfg.completion_tokens,
            temperature=cfg.temperature,
            beta=cfg.beta,
            lr_scheduler_type="constant",
        )
        trainer = GRPOTrainer(
            model=policy.model,
            reward_funcs=reward_func,
            args=args,
            train_dataset=data,
            processing_class=policy.tokenizer,
            peft_config=_lora(cfg),
            callbacks=[_progress(on_step, "reward")],
        )
        _quiet(trainer)
        trainer.train()
        policy.model = _merged(trainer.model)
    policy.model.eval()
    policy.tokenizer.padding_side = "left"


def save(policy: Policy, out: Path, meta: dict[str, Any]) -> None:
    """The fine-tuned model as a plain causal-LM folder (adapters folded in), its tokenizer, and `META`."""
    if out.exists() and any(out.iterdir()) and not (out / META).is_file():
        raise UsageError(f"{out} exists and is not a trained conductor: choose an empty folder for --out")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.model.save_pretrained(str(tmp))
    policy.tokenizer.save_pretrained(str(tmp))
    (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def read_meta(path: Path) -> dict[str, Any]:
    """What training recorded beside a conductor's weights ({} for a base model)."""
    file = path / META
    if not file.is_file():
        return {}
    data = json.loads(file.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def peak_memory_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
