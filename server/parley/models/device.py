"""Where models run: CUDA with fp16 when asked for or available, else the CPU in float32,
or, when asked for, with the speech models' encoder and output head in int8
(``models/int8.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DevicePlan:
    """Where the models run and in which precision."""

    device: torch.device
    dtype: torch.dtype
    int8: bool = False  # the encoder's linear layers and the output head in int8 (CPU only)

    @property
    def description(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.device.type} {dtype}{', encoder and output head int8' if self.int8 else ''}"

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """A loaded speech model moved to the device, for inference, in this precision."""
        model = model.to(self.device).eval()
        encoder = getattr(getattr(model, "model", None), "encoder", None)  # none: decoder-only
        if self.int8 and encoder is not None:
            from parley.models.int8 import quantize_linears

            # The encoder only (and the output head, which OutputHead reads in int8): the
            # decoder stays float32, so drafts and batching still change no token.
            quantize_linears(encoder)
        return model


COMPUTE_TYPES = ("auto", "float32", "int8")


def plan_device(choice: str, compute: str = "auto") -> DevicePlan:
    """``choice`` is auto, cpu or cuda; asking for cuda where there is none is an error.
    ``compute``: auto (fp16 on CUDA, float32 on a CPU), float32, or int8: the encoder's
    linear layers and the output head in int8, CPU only: faster, and a word here and
    there differs (bench/README.md, "int8 on a CPU"; on a GPU fp16 is faster still)."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {choice!r}")
    if compute not in COMPUTE_TYPES:
        raise ValueError(f"compute type must be one of {', '.join(COMPUTE_TYPES)}, not {compute!r}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if compute == "int8":
            raise ValueError("compute type int8 is for the CPU; on CUDA models run in fp16")
        return DevicePlan(torch.device("cuda"), torch.float16)
    return DevicePlan(torch.device("cpu"), torch.float32, int8=compute == "int8")


# torch's own choice (the physical cores), read before anything changes it.
DEFAULT_THREADS = torch.get_num_threads()


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch on CPU (None: torch's default); call it first thing on
    the thread that runs a model. The count is that thread's own (OpenMP keeps it per
    thread), so each model thread sets its own: a thread that never set it would take
    whatever count another thread set last."""
    torch.set_num_threads(threads or DEFAULT_THREADS)
