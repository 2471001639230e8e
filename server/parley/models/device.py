"""Where models run: CUDA with fp16 when asked for or available, else the CPU: with the
speech model's encoder in bfloat16 and its output head in int8 where the CPU has AMX
(its bfloat16 tiles run the encoder three times as fast), in float32 elsewhere; or, when
asked for, float32, the encoder and output head in int8 (``models/int8.py``), or the
encoder in bfloat16 on any CPU (it pays with AVX-512's BF16 too, less)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from parley.core.asr import COMPUTE_TYPES


@dataclass(frozen=True)
class DevicePlan:
    """Where the models run and in which precision."""

    device: torch.device
    dtype: torch.dtype
    int8: bool = False  # the encoder's linear layers and the output head in int8 (CPU only)
    bfloat16_encoder: bool = False  # the encoder in bfloat16, its output float32 (CPU only)

    @property
    def int8_head(self) -> bool:
        """Whether the output head reads its vocabulary matrix in int8 (and computes the
        tokens int8 ranks highest again in float32, ``models/output_head.py``): with
        int8, and with bfloat16, whose AMX tiles read that matrix no faster than int8
        does (base, 8 rows: float32 14.7 ms, bfloat16 4.4 ms, int8 2.8 ms)."""
        return self.int8 or self.bfloat16_encoder

    @property
    def description(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        extra = ", encoder and output head int8" if self.int8 else ""
        extra += ", encoder bfloat16, output head int8" if self.bfloat16_encoder else ""
        return f"{self.device.type} {dtype}{extra}"

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """A loaded speech model moved to the device, for inference, in this precision."""
        model = model.to(self.device).eval()
        encoder = getattr(getattr(model, "model", None), "encoder", None)  # none: decoder-only
        if self.int8 and encoder is not None:
            from parley.models.int8 import quantize_linears

            # The encoder only (and the output head, which OutputHead reads in int8): the
            # decoder stays float32, so drafts and batching still change no token.
            quantize_linears(encoder)
        if self.bfloat16_encoder and encoder is not None:
            _in_bfloat16(encoder)
        if self.device.type == "cpu":
            from parley.models.onednn import STEP_ROWS, WINDOW_ROWS, faster_linears

            # The same float32 products, through whichever library is faster here (an
            # int8 or bfloat16 encoder has none left to time).
            inner = getattr(model, "model", model)
            faster_linears(getattr(inner, "decoder", inner), STEP_ROWS)
            if encoder is not None:
                faster_linears(encoder, WINDOW_ROWS)
        return model


def _in_bfloat16(encoder: torch.nn.Module) -> None:
    """Run ``encoder`` in bfloat16 and hand its output on in float32, so that the decoder
    (and with it drafts and batching) computes as before."""
    encoder.to(torch.bfloat16)

    def half(value):
        return (
            value.to(torch.bfloat16)
            if torch.is_tensor(value) and value.is_floating_point()
            else value
        )

    def features_in(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
        return tuple(half(a) for a in args), {k: half(v) for k, v in kwargs.items()}

    def hidden_out(module: torch.nn.Module, args: tuple, output):
        output.last_hidden_state = output.last_hidden_state.float()
        return output

    encoder.register_forward_pre_hook(features_in, with_kwargs=True)
    encoder.register_forward_hook(hidden_out)


def plan_device(choice: str, compute: str = "auto") -> DevicePlan:
    """``choice`` is auto, cpu or cuda; asking for cuda where there is none is an error.
    ``compute``: auto (fp16 on CUDA; on a CPU bfloat16 where it has bfloat16 matrix
    instructions, float32 elsewhere), float32, or int8: the encoder's linear layers and
    the output head in int8, CPU only: faster, and a word here and there differs
    (bench/README.md, "int8 and bfloat16 on a CPU"; on a GPU fp16 is faster still);
    bfloat16: the encoder in bfloat16 and the output head in int8, CPU only, for CPUs
    with bfloat16 matrix instructions (AMX, AVX-512 BF16)."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {choice!r}")
    if compute not in COMPUTE_TYPES:
        raise ValueError(f"compute type must be one of {', '.join(COMPUTE_TYPES)}, not {compute!r}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if compute in ("int8", "bfloat16"):
            raise ValueError(f"compute type {compute} is for the CPU; on CUDA models run in fp16")
        return DevicePlan(torch.device("cuda"), torch.float16)
    if compute == "auto" and has_bfloat16_matrices():
        compute = "bfloat16"
    return DevicePlan(
        torch.device("cpu"),
        torch.float32,
        int8=compute == "int8",
        bfloat16_encoder=compute == "bfloat16",
    )


# Where the CPU's flags are listed (Linux); elsewhere none are known.
CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as the kernel lists them (``amx_bf16``, ``avx512_bf16``…);
    none where there is no ``/proc/cpuinfo``."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return frozenset()
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return frozenset(flags.partition(":")[2].split())


def has_bfloat16_matrices() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively: AMX's tiles (Intel Xeon
    since Sapphire Rapids) or AVX-512's BF16 dot products (AMD since Zen 4, Intel Cooper
    Lake). There the encoder in bfloat16 is the faster plan, its words and speakers as
    good: ten labelled streams' final p50 fell by a third or more on a 2-core Xeon with
    AMX, and their p95 by a third on a 2-core AMD EPYC with AVX-512 BF16
    (bench/README.md, "int8 and bfloat16 on a CPU")."""
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


# torch's own choice (the physical cores), read before anything changes it.
DEFAULT_THREADS = torch.get_num_threads()


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch on CPU (None: torch's default); call it first thing on
    the thread that runs a model. The count is that thread's own (OpenMP keeps it per
    thread), so each model thread sets its own: a thread that never set it would take
    whatever count another thread set last."""
    torch.set_num_threads(threads or DEFAULT_THREADS)
